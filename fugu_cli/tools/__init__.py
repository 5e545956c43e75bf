"""What the model can call: tool schemas, permissions and the context a call runs in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fugu_cli.types import PermissionMode

ToolKind = Literal["read", "edit", "exec"]
Answer = Literal["yes", "no", "always"]


@dataclass(frozen=True)
class ApprovalRequest:
    """What an approver is shown before an edit or a command runs."""

    agent: str
    tool: str
    kind: ToolKind
    summary: str  # one line: "edit src/app.py (+3 -1)" or "shell: pytest -q"
    detail: str  # the full diff, or the full command
    prefix: str  # what "always" remembers: "shell:pytest", "edit"


Approver = Callable[[ApprovalRequest], Answer]


@dataclass
class PermissionPolicy:
    """Mode plus allow/deny rules ("shell:git status", "edit", "shell"), and what "always" added."""

    mode: PermissionMode = "ask"
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)

    def check(self, kind: ToolKind, prefix: str) -> Literal["allow", "deny", "ask"]:
        if kind == "read":
            return "allow"
        if any(_matches(rule, prefix) for rule in self.deny):
            return "deny"
        if self.mode == "read-only":
            return "deny"
        if any(_matches(rule, prefix) for rule in self.allow):
            return "allow"
        if self.mode == "full-auto":
            return "allow"
        if self.mode == "auto-edit" and kind == "edit":
            return "allow"
        return "ask"

    def remember(self, prefix: str) -> None:
        if prefix not in self.allow:
            self.allow.append(prefix)


def _matches(rule: str, prefix: str) -> bool:
    """`shell` matches every command; `shell:git` matches `shell:git status` but not `shell:gitk`."""
    return prefix == rule or prefix.startswith(rule + " ") or prefix.startswith(rule + ":")


@dataclass
class ToolContext:
    """Where and for whom a tool call runs."""

    root: Path
    agent: str
    policy: PermissionPolicy = field(default_factory=PermissionPolicy)
    approve: Approver | None = None
    shell_timeout_s: float = 120.0
    output_cap: int = 30_000
    before_edit: Callable[[], None] | None = None  # e.g. checkpoint the tree before a turn's first edit
