"""Custom agents for the `task` tool, in Claude Code's format: Markdown files in the repository's
`.fugu/agents/` and `.claude/agents/` and in `agents/` beside the user config. Front matter gives `name`,
`description` (what the workers read to choose one), `tools` (Claude's names or fugu's; none: every tool the
permissions allow) and `model` (a worker's name or litellm id, or `auto`/`inherit`: the router staffs each
step); the body is the agent's instructions.

A repository's agents are read only once its folder is trusted: their instructions steer what the workers
do. Reads files only; cheap to import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.compat import CLAUDE_TOOLS
from fugu_cli.config import user_config_path
from fugu_cli.custom_commands import front_matter, split_tools

PROJECT_DIRS = (".fugu/agents", ".claude/agents")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_ROUTER = ("", "auto", "inherit", "default")
# Claude's tools that fugu has under other names, besides compat's (which maps permission rules)
_MORE_TOOLS: dict[str, tuple[str, ...]] = {
    "Bash": ("shell", "shell_output", "shell_kill"),
    "BashOutput": ("shell_output",),
    "KillShell": ("shell_kill",),
    "KillBash": ("shell_kill",),
    "LS": ("glob",),
    "Task": ("task",),
    "TodoWrite": ("todo_write",),
}


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str
    instructions: str = ""
    tools: tuple[str, ...] | None = None  # fugu's tool names; None: every tool the permissions allow
    model: str = ""  # as written: a worker, a litellm id, or "" / auto / inherit for the router
    scope: str = "builtin"  # builtin | user | project
    path: Path | None = None
    unknown_tools: tuple[str, ...] = ()  # names in `tools` fugu has no tool for

    @property
    def routed(self) -> bool:
        return self.model.strip().lower() in _ROUTER


GENERAL = AgentSpec(
    name="general-purpose",
    description="Any self-contained subtask: searching the code, reading and summarising, a focused change.",
)


def user_dir() -> Path:
    return user_config_path().parent / "agents"


def load(root: Path, trusted: bool) -> dict[str, AgentSpec]:
    """The agents a session in `root` offers: the built-in general-purpose one, the user's, then (when the
    folder is trusted) the project's, which win a name (`.fugu/agents` over `.claude/agents`)."""
    found = {GENERAL.name: GENERAL}
    folders = [(user_dir(), "user")]
    if trusted:
        folders += [(root / d, "project") for d in reversed(PROJECT_DIRS)]
    for folder, scope in folders:
        for spec in _read_folder(folder, scope):
            found[spec.name] = spec
    return found


def untrusted(root: Path) -> list[str]:
    """The names of the repository's own agents (what trusting the folder would add)."""
    return sorted({s.name for d in PROJECT_DIRS for s in _read_folder(root / d, "project")})


def _read_folder(folder: Path, scope: str) -> list[AgentSpec]:
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.glob("*.md")):
        spec = _parse(path, scope) if path.is_file() else None
        if spec is not None:
            out.append(spec)
    return out


def _parse(path: Path, scope: str) -> AgentSpec | None:
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError:
        return None
    meta, body = front_matter(text)
    name = (meta.get("name") or path.stem).strip()
    if not _NAME.match(name):
        return None
    tools, unknown = _tools(meta.get("tools"))
    return AgentSpec(
        name=name,
        description=" ".join(meta.get("description", "").split()) or _first_line(body),
        instructions=body.strip(),
        tools=tools,
        model=meta.get("model", "").strip(),
        scope=scope,
        path=path,
        unknown_tools=unknown,
    )


def _tools(value: str | None) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """fugu's tools for Claude's list (`Read, Grep, Bash`) or fugu's own names; None when not given."""
    if value is None or not value.strip() or value.strip() == "*":
        return None, ()
    names: list[str] = []
    unknown: list[str] = []
    for word in split_tools(value):
        word = word.split("(", 1)[0].strip()
        if not word:
            continue
        mapped = _MORE_TOOLS.get(word) or CLAUDE_TOOLS.get(word)
        if mapped:
            names.extend(mapped)
        elif word.islower() or word.startswith("mcp__"):
            names.append(word)  # fugu's own name (checked against the registry when the agent runs)
        else:
            unknown.append(word)
    return tuple(dict.fromkeys(names)), tuple(unknown)


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= 100 else line[:97] + "..."
