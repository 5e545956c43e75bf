"""Claude Code's names for fugu's things, so programs written for Claude Code drive fugu unchanged: permission
modes, tools and tool rules (`--allowedTools`), stop and terminal reasons, and Claude's flags that fugu
honours only partly or cannot honour at all.

Standard library only; knows nothing of the pool, the tools' code or the terminal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fugu_cli.errors import UsageError
from fugu_cli.types import PermissionMode, TurnStatus

# Claude Code's permission modes as fugu's. "dontAsk" refuses whatever no rule allows: fugu's `ask` without
# a terminal does exactly that.
CLAUDE_PERMISSION_MODES: dict[str, PermissionMode] = {
    "default": "ask",
    "acceptEdits": "auto-edit",
    "bypassPermissions": "full-auto",
    "plan": "read-only",
    "dontAsk": "ask",
}
CLAUDE_MODE_NAMES: dict[str, str] = {
    "ask": "default",
    "auto-edit": "acceptEdits",
    "full-auto": "bypassPermissions",
    "read-only": "plan",
}

# Claude's result subtypes and terminal reasons for fugu's turn statuses.
_SUBTYPES: dict[str, str] = {
    "error_max_budget": "error_max_budget_usd",
    "interrupted": "error_during_execution",
}
_TERMINAL: dict[str, str] = {
    "success": "completed",
    "error_max_turns": "max_turns",
    "error_max_budget": "budget_exhausted",
    "error_during_execution": "model_error",
}
_STOP: dict[str, str] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def result_subtype(status: TurnStatus) -> str:
    """Claude's `result.subtype` for a fugu turn status (an interrupt is an execution error there)."""
    return _SUBTYPES.get(status, status)


def terminal_reason(status: TurnStatus, stop_reason: str | None) -> str:
    """Claude's `terminal_reason`: an interrupt while the worker answered is `aborted_streaming`, one while
    tools ran (or between steps) `aborted_tools`."""
    if status == "interrupted":
        return "aborted_streaming" if stop_reason is None else "aborted_tools"
    return _TERMINAL.get(status, "completed")


def stop_reason(finish_reason: str | None) -> str | None:
    """Claude's `stop_reason` (end_turn, tool_use, max_tokens, ...) for an OpenAI-style finish reason."""
    if finish_reason is None:
        return None
    return _STOP.get(finish_reason, finish_reason)


# --- tools -------------------------------------------------------------------------------------------------

# Claude's tool names and the fugu tools that do the same job.
CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "Bash": ("shell",),
    "Read": ("read_file",),
    "Write": ("write_file",),
    "Edit": ("edit_file", "write_file"),  # Claude's Edit rules cover every tool that edits files
    "MultiEdit": ("edit_file",),
    "Glob": ("glob",),
    "Grep": ("grep",),
    "WebFetch": ("web_fetch",),
    "WebSearch": ("web_search",),
}
_READ_TOOLS = ("Read", "Glob", "Grep", "LS")
_RULE = re.compile(r"^(?P<name>[A-Za-z_][\w.-]*)(?:\((?P<arg>.*)\))?$", re.DOTALL)


@dataclass(frozen=True)
class ToolRules:
    """`--allowedTools` / `--disallowedTools` / `--tools` as fugu understands them."""

    allow: tuple[str, ...] = ()  # fugu permission rules ("shell:git status", "edit")
    deny: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()  # fugu tools the workers do not see at all
    only: tuple[str, ...] | None = None  # `--tools`: the workers see these fugu tools and no others
    notes: tuple[str, ...] = ()  # what was honoured only partly, one line each


def split_tool_list(values: Sequence[str]) -> list[str]:
    """Claude's tool lists: comma- or space-separated, a rule's parentheses kept whole ("Bash(git log:*)")."""
    out: list[str] = []
    for value in values:
        depth, word = 0, ""
        for ch in value:
            depth += (ch == "(") - (ch == ")")
            if depth == 0 and (ch == "," or ch.isspace()):
                if word:
                    out.append(word)
                word = ""
            else:
                word += ch
        if word:
            out.append(word)
    return out


def tool_rules(allowed: Sequence[str], disallowed: Sequence[str], tools: str | None = None) -> ToolRules:
    """Translate Claude's (or fugu's own) tool names and rules into fugu permission rules and tool lists.

    Grants are never wider than asked; a refusal fugu cannot scope as asked refuses more, and says so. A
    refusal fugu cannot enforce at all is a usage error."""
    allow: list[str] = []
    deny: list[str] = []
    remove: list[str] = []
    notes: list[str] = []
    for rule in split_tool_list(allowed):
        _allow(rule, allow, notes)
    for rule in split_tool_list(disallowed):
        _deny(rule, deny, remove, notes)
    only = None if tools is None or tools == "default" else _only(tools, notes)
    return ToolRules(
        tuple(dict.fromkeys(allow)),
        tuple(dict.fromkeys(deny)),
        tuple(dict.fromkeys(remove)),
        only,
        tuple(notes),
    )


def _parse(rule: str) -> tuple[str, str | None]:
    if ":" in rule and not rule.startswith(tuple(CLAUDE_TOOLS)) and "(" not in rule:
        return rule, None  # fugu's own rule, e.g. shell:git status
    if re.fullmatch(r"mcp__[\w-]+(__[\w-]+|__\*)?", rule):
        return rule, None  # an MCP server (mcp__github, mcp__github__*) or one of its tools
    match = _RULE.match(rule)
    if match is None:
        raise UsageError(f"tool rule {rule!r}: write it as Name or Name(pattern), e.g. Bash(git status:*)")
    return match["name"], match["arg"]


def _command(arg: str) -> str:
    """`git status:*` / `git status *` / `git status` -> `git status` (fugu matches by command prefix)."""
    arg = arg.strip()
    for tail in (":*", " *", "*"):
        if arg.endswith(tail):
            return arg[: -len(tail)].strip()
    return arg


def _allow(rule: str, allow: list[str], notes: list[str]) -> None:
    name, arg = _parse(rule)
    if name in ("shell", "edit", "git_commit") or name.startswith("shell:"):
        allow.append(name)
    elif name == "Bash":
        allow.append(f"shell:{_command(arg)}" if arg and _command(arg) else "shell")
    elif name in ("Edit", "Write", "MultiEdit", "NotebookEdit"):
        if arg:
            notes.append(f"--allowedTools {rule}: fugu cannot allow edits of some paths only; not granted")
        else:
            allow.append("edit")
    elif name in _READ_TOOLS or name in ("read_file", "glob", "grep", "git_status", "git_diff", "git_log"):
        return  # reads need no permission in fugu
    elif name.startswith("mcp__") and not arg:
        allow.append(_mcp(name))  # a server's tools (mcp__github) or one of them (mcp__github__get_issue)
    elif name in ("WebFetch", "web_fetch"):
        allow.append(_web(rule, arg, notes) if arg else "web")  # WebFetch(domain:docs.python.org)
    elif name in ("WebSearch", "web_search"):
        notes.append(f"--allowedTools {rule}: web_search is asked for by its host; name it in [web] allow")
    else:
        notes.append(f"--allowedTools {rule}: fugu has no such tool; ignored")


def _deny(rule: str, deny: list[str], remove: list[str], notes: list[str]) -> None:
    name, arg = _parse(rule)
    if name.startswith("shell:"):
        deny.append(name)
    elif name in ("shell", "edit", "git_commit"):
        deny.append(name)
        remove.extend({"shell": ["shell"], "edit": ["edit_file", "write_file"]}.get(name, [name]))
    elif name == "Bash":
        if arg and _command(arg):
            deny.append(f"shell:{_command(arg)}")
        else:
            deny.append("shell")
            remove.append("shell")
    elif name in ("Edit", "Write", "MultiEdit", "NotebookEdit"):
        if arg:
            notes.append(
                f"--disallowedTools {rule}: fugu cannot scope edit rules by path; every edit is refused"
            )
            deny.append("edit")
        elif name == "Edit":
            deny.append("edit")
            remove.extend(CLAUDE_TOOLS["Edit"])
        elif name == "Write":
            remove.append("write_file")
    elif name in _READ_TOOLS:
        if arg:
            raise UsageError(
                f"--disallowedTools {rule}: fugu cannot refuse reads of particular paths; "
                "disallow Read, Grep and Glob entirely, or drop the rule"
            )
        remove.extend(CLAUDE_TOOLS.get(name, ("glob",) if name == "LS" else ()))
    elif name in (
        "read_file",
        "glob",
        "grep",
        "write_file",
        "edit_file",
        "git_status",
        "git_diff",
        "git_log",
    ):
        remove.append(name)
    elif name.startswith("mcp__"):
        deny.append(_mcp(name))
        remove.append(_mcp(name))
    elif name in ("WebFetch", "web_fetch"):
        if arg:
            deny.append(_web(rule, arg, notes))
        else:
            deny.append("web")
            remove.append("web_fetch")
    elif name in ("WebSearch", "web_search"):
        remove.append("web_search")
    # anything else (Task) is a tool fugu does not have: refusing it is already true


def _web(rule: str, arg: str, notes: list[str]) -> str:
    """`WebFetch(domain:docs.python.org)` -> `web:docs.python.org` (fugu asks per host)."""
    host = arg.strip().removeprefix("domain:").strip().lower()
    if not re.fullmatch(r"[a-z0-9.-]+", host):
        raise UsageError(
            f"tool rule {rule!r}: write it as WebFetch(domain:HOST), e.g. WebFetch(domain:github.com)"
        )
    return f"web:{host}"


def _mcp(name: str) -> str:
    """`mcp__github__*` and `mcp__github` both mean every tool of the server github."""
    return name[:-3] if name.endswith("__*") else name


def _only(tools: str, notes: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for name in split_tool_list([tools]):
        mapped = CLAUDE_TOOLS.get(name)
        if mapped is not None:
            out.extend(mapped[:1] if name == "Edit" else mapped)
        elif re.fullmatch(r"[a-z_]+", name):
            out.append(name)
        else:
            notes.append(f"--tools {name}: fugu has no such tool; ignored")
    return tuple(dict.fromkeys(out))


# --- flags -------------------------------------------------------------------------------------------------

# Claude Code flags fugu cannot honour: a run that asked for them would silently do something else.
REFUSED: dict[str, str] = {
    "--settings": "fugu reads .fugu/config.toml and FUGU_* variables, not Claude Code's --settings",
    "--plugin-dir": "fugu has no plugins",
    "--json-schema": "fugu cannot force a structured answer (--json-schema)",
    "--session-id": "fugu chooses its own session ids; continue one with --resume ID",
    "--resume-session-at": "fugu resumes whole sessions only",
    "--resume-drops-turn": "fugu resumes whole sessions only",
    "--session-mirror": "fugu keeps its sessions in its own store (FUGU_HOME), not in a SessionStore",
    "--replay-user-messages": "fugu does not echo user messages back",
    "--agent": "fugu has no agent definitions: its router picks a worker per step (--model forces one)",
    "--plugin-dir-no-mcp": "fugu has no plugins",
    "--managed-settings": "fugu reads .fugu/config.toml and FUGU_* variables, not managed settings",
    "--no-session-persistence": "fugu records every session in its store: point FUGU_HOME at a temporary "
    "folder to keep nothing",
    "--channels": "fugu takes no inbound messages from MCP channels",
    "--sdk-url": "fugu runs here, not as a remote session",
    "--project-config-root": "fugu reads a repository's configuration from the folder it runs in",
}
# Values of Claude Code flags fugu cannot honour.
REFUSED_VALUES: dict[tuple[str, str], str] = {
    ("--permission-mode", "auto"): (
        "fugu has no model that judges each tool call; choose acceptEdits (edits), bypassPermissions "
        "(edits and commands), default or plan"
    ),
}
# Claude Code flags fugu accepts and ignores, saying so once: they tune a model fugu may not be using.
IGNORED: dict[str, str] = {
    "--fallback-model": "fugu fails over to another worker of its pool on its own",
    "--betas": "fugu sends no Anthropic beta headers",
    "--max-thinking-tokens": "fugu sets no thinking budget on its workers",
    "--thinking": "fugu sets no thinking mode on its workers",
    "--thinking-display": "fugu sets no thinking mode on its workers",
    "--effort": "fugu sets no effort level on its workers",
    "--task-budget": "fugu budgets a task in USD (--max-budget-usd), not in tokens",
    "--setting-sources": "fugu reads its own configuration layers",
}
# Flags without a value, and Claude flags that need nothing done: fugu emits no hook events, reads whatever
# an initialize request carries (--initialize-fields only announces them), and needs no opt-in before
# bypassPermissions.
_NO_VALUE = {
    "--fork-session",
    "--session-mirror",
    "--replay-user-messages",
    "--include-hook-events",
    "--strict-mcp-config",
    "--no-session-persistence",
    "--managed-settings-in-initialize",
    "--allow-dangerously-skip-permissions",
    "--debug-to-stderr",
}
_NOTHING_TO_DO = {
    "--include-hook-events",
    "--initialize-fields",
    "--managed-settings-in-initialize",
    "--allow-dangerously-skip-permissions",
}
_SAME_AS = {"--debug-to-stderr": "--debug"}


def screen_argv(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Remove the Claude Code flags fugu ignores (returning a note for each) and refuse those it cannot
    honour with a UsageError; everything else is left for the run command to parse."""
    out: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        takes_value = "=" not in arg and name not in _NO_VALUE
        if name in REFUSED:
            raise UsageError(f"{name}: {REFUSED[name]}")
        value = arg.split("=", 1)[1] if "=" in arg else (args[i + 1] if i + 1 < len(args) else "")
        if (name, value) in REFUSED_VALUES:
            raise UsageError(f"{name} {value}: {REFUSED_VALUES[name, value]}")
        if name in IGNORED or name in _NOTHING_TO_DO:
            if name in IGNORED:
                notes.append(f"{name} is ignored: {IGNORED[name]}")
            i += 2 if takes_value else 1
            continue
        if arg == "--":
            out.extend(args[i:])
            break
        out.append(_SAME_AS.get(arg, arg))
        i += 1
    return out, notes
