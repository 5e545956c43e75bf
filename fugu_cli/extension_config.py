"""Where MCP servers and hooks come from: fugu's config (`[mcp_servers.NAME]`, `[[hooks.EVENT]]`; the user's
layer and a trusted project's), a project's `.mcp.json` (Claude Code's format) and the `hooks` of its
`.claude/settings.json` and `.claude/settings.local.json` (Claude Code's shape).

A repository's own files add servers or hooks only once its folder is trusted; until then they are named as
ignored. Reads files and the environment (`${VAR}` in `.mcp.json`); starts nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from fugu_cli.config import (
    DEFAULT_MCP_TOOL_TIMEOUT_S,
    HOOK_EVENTS,
    Config,
    HookSettings,
    McpServerSettings,
    explain,
    is_trusted,
    read_toml,
    user_config_path,
)
from fugu_cli.errors import ConfigError
from fugu_cli.redact import is_secret_name, register_secret_values

Transport = Literal["stdio", "http", "sse"]
DEFAULT_HOOK_TIMEOUT_S = 60.0
CLAUDE_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server as fugu will run it."""

    name: str
    transport: Transport
    source: str  # "user config", ".fugu/config.toml", ".mcp.json", "--mcp-config"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    network: bool = True
    writable: tuple[str, ...] = ()
    startup_timeout_s: float = 30.0
    tool_timeout_s: float = DEFAULT_MCP_TOOL_TIMEOUT_S

    def fingerprint(self) -> str:
        """A digest of what decides the server's tools (its cached catalog is keyed by it)."""
        what = [self.transport, self.command, list(self.args), sorted(self.env.items()), self.url]
        return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]

    @property
    def where(self) -> str:
        """The command line or URL, for listings (header and environment values are never shown)."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return self.url or ""


@dataclass(frozen=True)
class HookSpec:
    """One hook command: run on `event` when `matcher` matches (tool events) or always."""

    event: str
    matcher: str
    command: str
    timeout_s: float = DEFAULT_HOOK_TIMEOUT_S
    source: str = ""


@dataclass(frozen=True)
class ExtensionConfig:
    servers: tuple[ServerSpec, ...] = ()
    hooks: tuple[HookSpec, ...] = ()
    notices: tuple[str, ...] = ()  # what was ignored, and why (said once, at the first turn)


def load_extensions(
    config: Config, root: Path, *, extra_servers: Mapping[str, Any] | None = None, strict: bool = False
) -> ExtensionConfig:
    """The servers and hooks a session in `root` gets. `extra_servers` (`--mcp-config`, the user's own flag)
    are added on top; with `strict` they are the only servers."""
    notices: list[str] = []
    trusted = config.project_trusted
    servers: dict[str, ServerSpec] = {}
    user_names = _user_server_names()
    disabled = {n for n, s in config.mcp_servers.items() if not s.enabled}
    if not strict:
        if trusted:
            servers.update(_mcp_json(root / ".mcp.json", notices))
        for name, settings in config.mcp_servers.items():
            source = "user config" if name in user_names else ".fugu/config.toml"
            if settings.enabled and _good_name(name, source, notices):
                servers[name] = _from_settings(name, settings, source)
    for name, raw in (extra_servers or {}).items():
        spec = _from_claude(name, raw, "--mcp-config", notices)
        if spec is not None:
            servers[name] = spec
    for name in disabled:
        servers.pop(name, None)
    for spec in servers.values():
        register_secret_values(_secrets(spec))
    hooks = [
        HookSpec(event, entry.matcher, cmd.command, cmd.timeout or DEFAULT_HOOK_TIMEOUT_S, "config")
        for event, entries in config.hooks.items()
        for entry in entries
        for cmd in entry.commands()
    ]
    if trusted:
        for rel in CLAUDE_SETTINGS:
            hooks += _claude_hooks(root / rel, rel, notices)
    else:
        notices += _untrusted_notice(root)
    return ExtensionConfig(tuple(servers.values()), tuple(hooks), tuple(notices))


def untrusted_extensions(root: Path) -> list[str]:
    """What this repository's own files would add that needs trust: `.mcp.json`'s servers, Claude hooks."""
    if is_trusted(root):
        return []
    wanted: list[str] = []
    names = _mcp_json_names(root / ".mcp.json")
    if names:
        wanted.append(f".mcp.json servers ({', '.join(names)})")
    for rel in CLAUDE_SETTINGS:
        if _claude_hook_events(root / rel):
            wanted.append(f"{rel} hooks")
    return wanted


def parse_mcp_config(text: str) -> dict[str, Any]:
    """`--mcp-config`: a file name or a JSON string holding `{"mcpServers": {...}}`."""
    raw = text.strip()
    if not raw.startswith("{"):
        try:
            raw = Path(raw).expanduser().read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"--mcp-config {text}: {e.strerror or e}") from None
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ConfigError(f"--mcp-config: not valid JSON ({e})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError('--mcp-config: expected {"mcpServers": {"NAME": {...}}}')
    return servers


def _secrets(spec: ServerSpec) -> dict[str, str]:
    """A server's secrets kept in config: secret-named `env` values and every header value (a bearer token
    also without its scheme), so no tool result, log or store row shows them."""
    found = {v: f"[{spec.name} {k}]" for k, v in spec.env.items() if is_secret_name(k)}
    for key, value in spec.headers.items():
        found[value] = f"[{spec.name} header {key}]"
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "token", "basic"):
            found[token] = f"[{spec.name} header {key}]"
    return found


# --- fugu's config -------------------------------------------------------------------------------------


def _user_server_names() -> set[str]:
    path = user_config_path()
    if not path.is_file():
        return set()
    table = read_toml(path).get("mcp_servers")
    return set(table) if isinstance(table, dict) else set()


def _from_settings(name: str, s: McpServerSettings, source: str) -> ServerSpec:
    transport: Transport = "stdio" if s.command is not None else ("sse" if s.type == "sse" else "http")
    return ServerSpec(
        name=name,
        transport=transport,
        source=source,
        command=s.command,
        args=tuple(s.args),
        env=dict(s.env),
        url=s.url,
        headers=dict(s.headers),
        network=s.network,
        writable=tuple(s.writable),
        startup_timeout_s=s.startup_timeout_s,
        tool_timeout_s=s.tool_timeout_s,
    )


def _good_name(name: str, source: str, notices: list[str]) -> bool:
    if _NAME.match(name) and "__" not in name:
        return True
    notices.append(
        f"MCP server {name!r} in {source} was skipped: a name may hold letters, digits, '-' and single '_'"
    )
    return False


# --- Claude Code's files -------------------------------------------------------------------------------


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}. Fix the file or move it away.") from None


def _mcp_json_names(path: Path) -> list[str]:
    if not path.is_file():
        return []
    try:
        servers = _read_json(path).get("mcpServers")
    except (ConfigError, AttributeError):
        return ["(unreadable)"]
    return list(servers) if isinstance(servers, dict) else []


def _mcp_json(path: Path, notices: list[str]) -> dict[str, ServerSpec]:
    if not path.is_file():
        return {}
    data = _read_json(path)
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        notices.append('.mcp.json holds no "mcpServers" object; no server was loaded from it')
        return {}
    out: dict[str, ServerSpec] = {}
    for name, raw in servers.items():
        spec = _from_claude(str(name), raw, ".mcp.json", notices)
        if spec is not None:
            out[spec.name] = spec
    return out


def _from_claude(name: str, raw: Any, source: str, notices: list[str]) -> ServerSpec | None:
    """A server in Claude Code's shape: `{command, args, env}` or `{type: "http"|"sse", url, headers}`, and
    `timeout`, one tool call's limit in milliseconds as Claude Code reads it."""
    if not _good_name(name, source, notices):
        return None
    if not isinstance(raw, dict):
        notices.append(f"MCP server {name!r} in {source} was skipped: it is not a JSON object")
        return None
    kind = raw.get("type")
    fields = {
        "command": raw.get("command"),
        "args": raw.get("args") or [],
        "env": raw.get("env") or {},
        "url": raw.get("url"),
        "headers": raw.get("headers") or {},
        "type": "stdio" if kind is None and raw.get("command") else kind,
    }
    timeout = _timeout_ms(name, raw.get("timeout"), source, notices)
    if timeout is not None:
        fields["tool_timeout_s"] = timeout / 1000
    try:
        expanded = _expand(fields)
        settings = McpServerSettings.model_validate(expanded)
    except KeyError as e:
        notices.append(f"MCP server {name!r} in {source} was skipped: ${{{e.args[0]}}} is not set")
        return None
    except ValidationError as e:
        notices.append(f"MCP server {name!r} in {source} was skipped: {explain(e, McpServerSettings)}")
        return None
    return _from_settings(name, settings, source)


def _timeout_ms(name: str, value: Any, source: str, notices: list[str]) -> float | None:
    """`timeout` in milliseconds; a value that is not a positive number is said and the default kept."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        notices.append(
            f"MCP server {name!r} in {source}: timeout {value!r} is not a positive number of milliseconds; "
            f"the default {DEFAULT_MCP_TOOL_TIMEOUT_S:g} s holds"
        )
        return None
    if value < 1000:
        notices.append(
            f"MCP server {name!r} in {source}: timeout {value:g} is in milliseconds, so a tool call gets "
            f"{value / 1000:g} s (write {value * 1000:g} for {value:g} s)"
        )
    return float(value)


def _expand(value: Any) -> Any:
    """`${VAR}` and `${VAR:-default}` from the environment, as Claude Code expands them in .mcp.json."""
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(2) is not None:
                return m.group(2)
            raise KeyError(m.group(1))

        return _VAR.sub(one, value)
    if isinstance(value, list):
        return [_expand(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    return value


def _claude_hook_events(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = _read_json(path)
    except ConfigError:
        return {"(unreadable)": []}
    hooks = data.get("hooks") if isinstance(data, dict) else None
    return hooks if isinstance(hooks, dict) else {}


def _claude_hooks(path: Path, rel: str, notices: list[str]) -> list[HookSpec]:
    events = _claude_hook_events(path)
    out: list[HookSpec] = []
    for event, groups in events.items():
        if event not in HOOK_EVENTS:
            notices.append(f"{rel}: fugu does not run {event} hooks; they were skipped")
            continue
        for group in groups if isinstance(groups, list) else []:
            try:
                entry = HookSettings.model_validate(
                    {
                        "matcher": (group or {}).get("matcher") or "",
                        "hooks": _command_hooks(group, rel, notices),
                    }
                )
            except (ValidationError, AttributeError):
                notices.append(f"{rel}: a {event} hook was skipped: it has no command")
                continue
            for cmd in entry.commands():
                timeout = cmd.timeout or DEFAULT_HOOK_TIMEOUT_S
                out.append(HookSpec(event, entry.matcher, cmd.command, timeout, rel))
    return out


def _command_hooks(group: Any, rel: str, notices: list[str]) -> list[Any]:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    kept = []
    for h in hooks if isinstance(hooks, list) else []:
        if isinstance(h, dict) and h.get("type", "command") == "command":
            kept.append(h)
        else:
            kind = h.get("type") if isinstance(h, dict) else type(h).__name__
            notices.append(f"{rel}: fugu runs command hooks only; a {kind} hook was skipped")
    return kept


def _untrusted_notice(root: Path) -> list[str]:
    wanted = []
    names = _mcp_json_names(root / ".mcp.json")
    if names:
        wanted.append(f"the MCP servers of .mcp.json ({', '.join(names)})")
    for rel in CLAUDE_SETTINGS:
        if _claude_hook_events(root / rel):
            wanted.append(f"the hooks of {rel}")
    if not wanted:
        return []
    return [
        f"this folder is not trusted, so fugu did not load {' nor '.join(wanted)}. "
        "Trust it with --trust-project, or answer yes when the REPL asks"
    ]
