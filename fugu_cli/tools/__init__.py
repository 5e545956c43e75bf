"""What the model can call: tool schemas, permissions and the context a call runs in."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from fugu_cli.tools.sandbox import SandboxPolicy

if TYPE_CHECKING:
    from fugu_cli.config import Config
    from fugu_cli.tools.background import BackgroundShells
    from fugu_cli.tools.task import Delegate

from fugu_cli.types import PermissionMode

ToolKind = Literal["read", "edit", "exec", "web"]
PROTECTED_PREFIX = "protected:"
# repository files that configure what fugu (or Claude Code) runs: editing them always asks
PROTECTED_FILES = (".fugu/", ".mcp.json", ".claude/", ".git/")


def protected(rel: str) -> bool:
    return any(rel == p.rstrip("/") or rel.startswith(p) for p in PROTECTED_FILES)


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


@dataclass(frozen=True)
class Part:
    """One thing a call would do, as rules see it: `shell:git status`, `edit`.

    An opaque part (a command whose name is only known at run time) is allowed only by a rule equal to its
    prefix, or by the bare namespace (`shell`) or full-auto when no deny rule of that namespace exists.
    """

    prefix: str
    opaque: bool = False


@dataclass(frozen=True)
class PermissionPolicy:
    """Mode plus allow/deny rules ("shell:git status", "edit", "shell"). A value: an "always" answer makes a
    new policy (`allowing`), which whoever owns the run keeps (the agent run for its later calls, the session
    for later turns)."""

    mode: PermissionMode = "ask"
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "deny", tuple(self.deny))

    def check(self, kind: ToolKind, prefix: str, opaque: bool = False) -> Literal["allow", "deny", "ask"]:
        if kind == "read":
            return "allow"
        if kind == "web":  # changes nothing here, but a URL can carry data out: asked for unless allowed
            if any(_matches(rule, prefix) for rule in self.deny):
                return "deny"
            allowed = any(_matches(rule, prefix) for rule in self.allow) or self.mode == "full-auto"
            return "allow" if allowed else "ask"
        if prefix.startswith(PROTECTED_PREFIX):
            # fugu's own config, MCP servers, hooks: whoever can edit these decides what runs next time,
            # so the user is asked whatever the mode (and refused without a terminal); "always" holds
            if self.mode == "read-only" or any(_matches(r, prefix) for r in self.deny):
                return "deny"
            return "allow" if prefix in self.allow else "ask"
        if opaque:
            return self._check_opaque(prefix)
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

    def _check_opaque(self, prefix: str) -> Literal["allow", "deny", "ask"]:
        namespace = prefix.split(":", 1)[0]
        if namespace in self.deny or self.mode == "read-only":
            return "deny"
        if prefix in self.allow:
            return "allow"
        denies_some = any(r.split(":", 1)[0] == namespace for r in self.deny)
        if not denies_some and (namespace in self.allow or self.mode == "full-auto"):
            return "allow"
        return "ask"

    def denies(self, prefix: str) -> bool:
        """Whether a deny rule covers `prefix`."""
        return any(_matches(rule, prefix) for rule in self.deny)

    def allowing(self, *prefixes: str) -> PermissionPolicy:
        """This policy with `prefixes` allowed too (an "always" answer, a custom command's allowed-tools)."""
        added = tuple(p for p in dict.fromkeys(prefixes) if p not in self.allow)
        return dataclasses.replace(self, allow=(*self.allow, *added)) if added else self


def _matches(rule: str, prefix: str) -> bool:
    """`shell` matches every command; `shell:git` matches `shell:git status` but not `shell:gitk`;
    `mcp__github` (or `mcp__github__*`) matches every tool of the MCP server github, `mcp` every MCP tool."""
    if rule.endswith("__*"):
        rule = rule[:-3]
    return (
        prefix == rule
        or prefix.startswith(rule + " ")
        or prefix.startswith(rule + ":")
        or prefix.startswith(rule + "__")
    )


@dataclass(frozen=True)
class WebPolicy:
    """`[web]`: the hosts web_fetch may reach without asking (`allow`) or never (`deny`); a rule names a host
    and its subdomains, `*` every public host. Pages are cut at `max_bytes`."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    max_bytes: int = 2_000_000
    timeout_s: float = 30.0
    search: str | None = None  # web_search's provider: "brave", or an MCP tool (mcp__server__tool)
    search_url: str | None = None  # the provider's endpoint (default: its public one)
    search_key_env: str | None = None  # the variable holding its key (default: BRAVE_API_KEY)


@dataclass(frozen=True)
class EditChecks:
    """`[checks]`: what runs after each edit (commands with `{files}`, a language server), its findings given
    back in the edit's result, at most `max_chars` of them."""

    commands: tuple[str, ...] = ()
    lsp: tuple[str, ...] = ()
    timeout_s: float = 60.0
    max_chars: int = 4000


@dataclass(frozen=True)
class ToolContext:
    """Where and for whom a tool call runs. A value: each call gets its own copy (`dataclasses.replace`)."""

    root: Path
    agent: str
    policy: PermissionPolicy = field(default_factory=PermissionPolicy)
    approve: Approver | None = None
    shell_timeout_s: float = 120.0
    output_cap: int = (
        32_000  # characters of one result (about 8k tokens); the rest is cut, head and tail kept
    )
    before_edit: Callable[[], None] | None = None  # e.g. checkpoint the tree before a turn's first edit
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    cancel: threading.Event | None = None  # set when the turn is cancelled: a running command is killed
    output_dir: Path | None = None  # full outputs of cut results; default FUGU_HOME/tool-output
    notify: Callable[[str], None] | None = None  # tell the user something now (the agent emits a Notice)
    grant: Callable[[str], None] | None = None  # the user answered "always" for this prefix: keep allowing it
    call_id: str = ""  # the call being run (the agent sets it for each call)
    budget_left: float | None = None  # USD the run may still spend (None: no budget)
    delegate: Delegate | None = None  # runs a `task` call as a subagent (None: no subagents here)
    leave_plan: Callable[[PermissionMode], None] | None = None  # the plan was approved: go on in this mode
    after_edit: Callable[[str, str], None] | None = None  # (call id, tool) once a call changed the tree
    background: BackgroundShells | None = None  # the session's background commands (None: none allowed)
    dirs: tuple[Path, ...] = ()  # folders beside the root the file tools may reach (--add-dir), resolved
    web: WebPolicy = field(default_factory=WebPolicy)
    checks: EditChecks = field(default_factory=EditChecks)

    def with_dirs(self, dirs: Sequence[Path]) -> ToolContext:
        """This context with `dirs` reachable too: by the file tools, and by commands in the sandbox (writable
        as the workspace is)."""
        if tuple(dirs) == self.dirs:
            return self
        sandbox = dataclasses.replace(self.sandbox, extra_roots=tuple(str(d) for d in dirs))
        return dataclasses.replace(self, dirs=tuple(dirs), sandbox=sandbox)


def configure_tools(
    config: Config, root: Path, policy: PermissionPolicy, approve: Approver | None
) -> ToolContext:
    """Apply `config` to the tools: the sandbox of fugu's own git calls, and the model's tool context."""
    from fugu_cli.tools.sandbox import policy_from_config, set_default_policy

    sandbox = policy_from_config(config.sandbox)
    set_default_policy(sandbox)
    return ToolContext(
        root=root,
        agent="",
        policy=policy,
        approve=approve,
        shell_timeout_s=config.shell_timeout_s,
        output_cap=config.tools.output_tokens * 4,
        sandbox=sandbox,
        web=WebPolicy(
            allow=tuple(config.web.allow),
            deny=tuple(config.web.deny),
            max_bytes=config.web.max_bytes,
            timeout_s=config.web.timeout_s,
            search=config.web.search,
            search_url=config.web.search_url,
            search_key_env=config.web.search_key_env,
        ),
        checks=EditChecks(
            commands=tuple(config.checks.after_edit),
            lsp=tuple(config.checks.lsp),
            timeout_s=config.checks.timeout_s,
            max_chars=config.checks.max_chars,
        ),
    )
