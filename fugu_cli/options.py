"""What a user asks for when starting a session: the one shape of run options, shared by the CLI, the REPL,
`fugu serve` and `fugu eval`, and the config overrides it implies.

Cheap to import (the REPL builds these before anything heavy loads); knows no config files and no pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.compat import CLAUDE_PERMISSION_MODES
from fugu_cli.errors import UsageError
from fugu_cli.types import PERMISSION_MODES, PermissionMode

# Claude Code's names for the same modes are accepted too, so programs written for it drive fugu unchanged.
PERMISSION_MODE_NAMES: tuple[str, ...] = (*PERMISSION_MODES, *CLAUDE_PERMISSION_MODES)


def find_repo_root(start: Path) -> Path | None:
    for d in (start, *start.parents):
        if (d / ".git").exists():
            return d
    return None


def project_config_path(cwd: Path) -> Path:
    """The repository's own `.fugu/config.toml` (it may not exist)."""
    return (find_repo_root(cwd) or cwd) / ".fugu" / "config.toml"


def permission_mode(name: str) -> PermissionMode:
    """fugu's mode for `name` (fugu's own names, or Claude Code's); a clear usage error otherwise."""
    if name in PERMISSION_MODES:
        return name  # type: ignore[return-value]
    if name in CLAUDE_PERMISSION_MODES:
        return CLAUDE_PERMISSION_MODES[name]
    if name == "auto":
        raise UsageError(
            "--permission-mode auto: fugu has no model that judges each tool call; choose acceptEdits "
            "(edits), bypassPermissions (edits and commands), default or plan"
        )
    raise UsageError(f"--permission-mode {name}: choose one of {', '.join(PERMISSION_MODE_NAMES)}")


def added_dir(folder: Path, root: Path) -> Path:
    """`folder` (relative to `root`) as a folder the tools may reach beside the repository at `root`; a usage
    error when it is not a folder, or is the repository or inside it (already reachable)."""
    path = (root / folder.expanduser()).resolve()
    if not path.is_dir():
        raise UsageError(f"--add-dir {folder}: no such folder")
    top = root.resolve()
    if path == top or path.is_relative_to(top):
        raise UsageError(
            f"--add-dir {folder}: it is inside the repository {top}, which the tools reach already"
        )
    if path == Path(path.anchor) or path == Path.home():
        raise UsageError(f"--add-dir {folder}: add a project folder, not {path} itself")
    return path


@dataclass(frozen=True)
class RunOptions:
    """What the user asked for (None: not given, the configuration decides)."""

    cwd: Path = field(default_factory=Path.cwd)
    pool: str | None = None
    worker: str | None = None
    router: str | None = None
    cost_weight: float | None = None
    permission_mode: PermissionMode | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    resume: str | None = None
    continue_last: bool = False
    fork_session: bool = False  # resume into a new session (a copy of the transcript), the old one untouched
    stream: bool = False  # show the worker's text as it arrives (a terminal in text mode)
    ultra: bool | None = None
    plan: Path | None = None  # --plan FILE: the workflow ultra mode runs instead of asking the conductor
    trust_project: bool = False  # obey the repository's own .fugu/config.toml in full for this run
    system_prompt: str | None = None  # replaces fugu's own instructions (project files are still added)
    append_system_prompt: str | None = None  # added after them
    allow: tuple[str, ...] = ()  # permission rules on top of the configured ones ("shell:git status")
    deny: tuple[str, ...] = ()
    hidden_tools: tuple[str, ...] = ()  # tools the workers do not see
    only_tools: tuple[str, ...] | None = None  # the workers see these tools and no others
    repo_map: bool | None = None  # --no-repo-map: False
    mcp_config: tuple[str, ...] = ()  # --mcp-config: files or JSON strings of {"mcpServers": {...}}
    strict_mcp_config: bool = False  # --strict-mcp-config: only those servers
    add_dirs: tuple[Path, ...] = ()  # --add-dir: folders beside the repository the tools may reach
    images: tuple[Path, ...] = ()  # --image: pictures sent with the task
    check: str | None = None  # --check CMD: judges each attempt at a turn (beats [checks] verify)

    def overrides(self) -> dict[str, Any]:
        """The configuration layer these options make (the top one: flags beat every file)."""
        return {
            "pool": self.pool,
            "worker": self.worker,
            "router": self.router,
            "cost_weight": self.cost_weight,
            "permission_mode": self.permission_mode,
            "max_turns": self.max_turns,
            "max_budget_usd": self.max_budget_usd,
            "ultra": self.ultra,
            "context": None if self.repo_map is None else {"repo_map": self.repo_map},
        }

    @property
    def resuming(self) -> bool:
        return bool(self.resume or self.continue_last)
