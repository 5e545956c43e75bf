"""Role instructions for the role-based router variant (Thinker plans and critiques, Worker acts, Verifier
checks and may accept). Reads fugu_cli/prompts/role_*.md; imports no torch."""

from __future__ import annotations

from importlib import resources

ROLES = ("thinker", "worker", "verifier")
ACCEPT = "ACCEPT"  # a Verifier reply with this line alone ends the turn
ROLE_MAX_STEPS = 5  # default step limit of a turn in the role variant


def role_instructions(role: str) -> str:
    """The instructions prepended to the worker's system prompt when the router chose `role`."""
    key = role.strip().lower()
    if key not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    return (resources.files("fugu_cli") / "prompts" / f"role_{key}.md").read_text(encoding="utf-8").strip()


def is_accept(reply: str | None) -> bool:
    """Whether a Verifier's reply accepts the work: some line of it is exactly `ACCEPT`."""
    return any(line.strip().strip("*`") == ACCEPT for line in (reply or "").splitlines())
