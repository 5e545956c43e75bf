"""What Claude's Agent SDKs ask for in their `initialize` control request (the TypeScript SDK sends its
`systemPrompt`, `appendSystemPrompt`, `mcpServers` and more there, not on the command line), read field by
field: honoured as run options, or refused with a reason the SDK shows its user. Never ignored: a field
fugu does not know is refused too.

Reads the lines before the session is built on a thread of its own (a signal still stops a run whose
stdin is silent); otherwise pure: a request in, `InitializeAsks` out (or a UsageError).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.errors import UsageError
from fugu_cli.options import RunOptions

# Fields that tell fugu what the client can do (dialogs it can show, subagent output it can take): fugu
# asks for none of these things, so they hold whatever their value.
_CLIENT_ABILITIES = (
    "supportedDialogKinds",
    "perTaskStopAffordance",
    "rapidFollowupPreempt",
    "offersBypassSwitchBack",
    "keepsBypassHeld",
    "agentProgressSummaries",
    "forwardSubagentText",
    "forwardNestedSubagentToolCalls",
)
# Fields fugu cannot honour, with what to do instead.
_REFUSED = {
    "hooks": "fugu runs no SDK hook callbacks; start the query without hooks, and give fugu shell hooks in "
    "its config ([[hooks.PreToolUse]]) or .claude/settings.json instead",
    "sdkMcpServers": "fugu cannot reach in-process SDK MCP servers (createSdkMcpServer); run the server as "
    "a command in mcpServers instead",
    "sdkMcpServerConfigs": "fugu cannot reach in-process SDK MCP servers",
    "sdkMcpServerManifests": "fugu cannot reach in-process SDK MCP servers",
    "jsonSchema": "fugu cannot force a structured answer (outputFormat)",
    "agents": "fugu has no subagents: its router picks a worker for every step, and --ultra has a conductor "
    "split the task between workers",
    "planModeInstructions": "fugu's plan mode (read-only) has no separate instructions; put them in "
    "appendSystemPrompt",
    "systemPromptSnapshot": "fugu does not report its system prompt",
    "appendSubagentSystemPrompt": "fugu has no subagents",
    "toolAliases": "fugu cannot rename its tools",
    "codeRunningMcpTools": "fugu asks before any MCP tool in the default mode; it has no separate list",
    "excludeDynamicSections": "fugu's instructions have no optional dynamic sections",
    "skills": "fugu has no skills",
    "webSearchIsolationExemptMcpServers": "fugu has no web search tool",
    "promptSuggestions": "fugu makes no prompt suggestions",
    "plugins": "fugu has no plugins",
    "managedSettings": "fugu reads .fugu/config.toml and FUGU_* variables, not managed settings",
    "settings": "fugu reads .fugu/config.toml and FUGU_* variables, not Claude Code's settings",
}


@dataclass(frozen=True)
class InitializeAsks:
    """What an `initialize` request asks of the run."""

    system_prompt: str | None = None  # replaces fugu's instructions (None: keep them)
    append_system_prompt: str | None = None
    mcp_servers: Mapping[str, Any] | None = None  # {"name": {command, args, ...}}, as --mcp-config
    disallowed_tools: tuple[str, ...] = ()
    trusted: bool = False  # workspaceTrust accepted for this folder
    title: str | None = None

    def applied(self) -> dict[str, bool]:
        """The initialize response's confirmations the SDK checks."""
        out: dict[str, bool] = {}
        if self.mcp_servers is not None:
            out["mcp_servers_applied"] = True
        if self.disallowed_tools:
            out["disallowed_tools_applied"] = True
        return out

    def fold(self, opts: RunOptions) -> RunOptions:
        """The run options with these asks in (the tool rules are the caller's: they need the flags)."""
        prompt = self.system_prompt if self.system_prompt is not None else opts.system_prompt
        appended = "\n\n".join(p for p in (opts.append_system_prompt, self.append_system_prompt) if p)
        config = opts.mcp_config
        if self.mcp_servers is not None:
            config = (*config, json.dumps({"mcpServers": dict(self.mcp_servers)}))
        return dataclasses.replace(
            opts,
            system_prompt=prompt or None,
            append_system_prompt=appended or None,
            mcp_config=config,
            trust_project=opts.trust_project or self.trusted,
        )


def is_initialize(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("type") == "control_request"
        and isinstance(message.get("request"), dict)
        and message["request"].get("subtype") == "initialize"
    )


def leading_initialize(
    lines: Iterator[str], wait: bool, stopped: Callable[[], bool]
) -> tuple[list[str], dict[str, Any] | None]:
    """The lines read before the session is built, and the `initialize` request among them: the first line,
    or with `wait` (--await-initialize) every line until the initialize comes. Gives up when `stopped`."""
    found: list[tuple[list[str], dict[str, Any] | None]] = []
    reader = threading.Thread(target=lambda: found.append(_read(lines, wait)), name="fugu-stdin", daemon=True)
    reader.start()
    while reader.is_alive() and not stopped():
        reader.join(0.1)
    return found[0] if found else ([], None)


def _read(lines: Iterator[str], wait: bool) -> tuple[list[str], dict[str, Any] | None]:
    head: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        head.append(line)
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if is_initialize(message):
            return head, message
        if not wait:
            break
    return head, None


def refusal(request: Mapping[str, Any], reason: str) -> dict[str, Any]:
    """The control response that refuses `request`."""
    reply = {"subtype": "error", "request_id": request.get("request_id"), "error": reason}
    return {"type": "control_response", "response": reply}


def read_initialize(request: Mapping[str, Any], folders: tuple[Path, ...]) -> InitializeAsks:
    """The asks of one `initialize` request; a UsageError names the first field fugu cannot honour."""
    for key, value in request.items():
        if key == "subtype" or key in _CLIENT_ABILITIES or _empty(value):
            continue
        if key in _REFUSED:
            raise UsageError(f"initialize {key}: {_REFUSED[key]}")
        if key not in _HONOURED:
            raise UsageError(f"initialize {key}: fugu does not know this field, so it cannot honour it")
    return InitializeAsks(
        system_prompt=_prompt(request.get("systemPrompt")),
        append_system_prompt=_text(request, "appendSystemPrompt"),
        mcp_servers=_servers(request.get("mcpServers")),
        disallowed_tools=_names(request.get("disallowedTools")),
        trusted=_trusted(request.get("workspaceTrust"), folders),
        title=_text(request, "title"),
    )


_HONOURED = ("systemPrompt", "appendSystemPrompt", "mcpServers", "disallowedTools", "workspaceTrust", "title")


def _empty(value: Any) -> bool:
    return value is None or value is False or value in ("", [], {})


def _prompt(raw: Any) -> str | None:
    """The SDK sends a list of strings (a string of its own option wrapped); all empty: keep fugu's."""
    parts = [raw] if isinstance(raw, str) else raw
    if parts is None:
        return None
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise UsageError("initialize systemPrompt: must be a string or a list of strings")
    text = "\n\n".join(p for p in parts if p.strip())
    return text or None


def _text(request: Mapping[str, Any], key: str) -> str | None:
    value = request.get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"initialize {key}: must be a string")
    return value or None


def _servers(raw: Any) -> Mapping[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise UsageError('initialize mcpServers: must be an object {"name": {"command": ...}}')
    return raw


def _names(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise UsageError("initialize disallowedTools: must be a list of tool names")
    return tuple(raw)


def _trusted(raw: Any, folders: tuple[Path, ...]) -> bool:
    """Trust accepted for the folder fugu runs in (or its repository's root) trusts the project."""
    if not isinstance(raw, dict) or raw.get("accepted") is not True:
        return False
    folder = raw.get("directory")
    if folder is not None and Path(str(folder)).resolve() not in {f.resolve() for f in folders}:
        raise UsageError(
            f"initialize workspaceTrust: trust was accepted for {folder}, but fugu runs in {folders[0]}; "
            "start it in that folder"
        )
    return True
