"""Slash commands that are not fugu's own (custom command files, MCP servers' prompts as
`/mcp__server__prompt`) and `@server:uri` resource mentions: each becomes a turn's prompt, for the REPL and
for `fugu -p "/name args"` alike. Cheap to import; the session is reached only when one is used.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fugu_cli.errors import UsageError

if TYPE_CHECKING:
    from fugu_cli.session import Session

MAX_RESOURCE = 100_000
_RESOURCE = re.compile(r"(?<!\S)@([A-Za-z0-9_-]+):(\S+)")


@dataclass(frozen=True)
class Prompted:
    """A slash command turned into a turn: its prompt and the settings its front matter asks for."""

    prompt: str
    worker: str | None = None
    allow: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def names(root: Path, session: Session | None) -> list[tuple[str, str]]:
    """(name, help) of every custom command and known MCP prompt, for completion and /help."""
    return [(name, help) for name, help, _ in described(root, session)]


def described(root: Path, session: Session | None) -> list[tuple[str, str, str]]:
    """(name, help, argument hint) of every custom command and MCP prompt known without starting a server."""
    from fugu_cli import custom_commands

    out = [(c.name, c.help, c.argument_hint) for c in custom_commands.load(root).values()]
    mcp = session.mcp if session is not None else None
    if mcp is not None:
        from fugu_cli.mcp import qualified

        for server, catalog in mcp.catalogs(start=False).items():
            for p in catalog.prompts:
                what = f"{p.description or p.name} (MCP prompt of {server})"
                out.append((qualified(server, p.name), what, " ".join(f"<{a.name}>" for a in p.arguments)))
    return out


def resolve(session: Session, name: str, arguments: str) -> Prompted | None:
    """The turn `/name arguments` asks for, or None when `name` is neither a custom command nor an MCP
    prompt. A problem the user can fix (an unusable worker, a server that is down) is a UsageError."""
    from fugu_cli import custom_commands

    command = custom_commands.load(session.root).get(name.lower())
    if command is not None:
        expanded = custom_commands.expand(command, arguments, session.trusted)
        allow, notes = _rules(expanded.allowed_tools, command.name)
        worker = _worker(session, expanded.worker, command.name)
        return Prompted(expanded.prompt, worker, allow, (*expanded.notes, *notes))
    if name.startswith("mcp__") and session.mcp is not None:
        return _mcp_prompt(session, name, arguments)
    return None


def attach_resources(text: str, session: Session) -> tuple[str, list[str]]:
    """Append the content of each `@server:uri` whose server is one of the session's MCP servers."""
    mcp = session.mcp
    if mcp is None:
        return text, []
    from fugu_cli.mcp import McpUnavailable

    blocks: list[str] = []
    attached: list[str] = []
    for m in _RESOURCE.finditer(text):
        server, uri = m.group(1), m.group(2).rstrip(".,;:!?)")
        if mcp.spec(server) is None or f"{server}:{uri}" in attached:
            continue
        try:
            content = mcp.read_resource(server, uri)
        except McpUnavailable as e:
            raise UsageError(f"@{server}:{uri}: {e}") from None
        cut = "\n[… cut at 100 kB]" if len(content) > MAX_RESOURCE else ""
        blocks.append(f'<resource server="{server}" uri="{uri}">\n{content[:MAX_RESOURCE]}{cut}\n</resource>')
        attached.append(f"{server}:{uri}")
    if not blocks:
        return text, []
    return text + "\n\nResources the user attached:\n" + "\n".join(blocks), attached


def _rules(allowed: tuple[str, ...], name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not allowed:
        return (), ()
    from fugu_cli.compat import tool_rules

    try:
        rules = tool_rules(allowed, ())
    except UsageError as e:
        return (), (f"/{name}: allowed-tools not granted: {e}",)
    notes = tuple(n.replace("--allowedTools", f"/{name} allowed-tools") for n in rules.notes)
    return rules.allow, notes


def _worker(session: Session, spec: str | None, name: str) -> str | None:
    if not spec:
        return None
    from fugu_cli.app import worker_named

    try:
        return worker_named(session.pool, spec)
    except UsageError as e:
        raise UsageError(
            f"/{name}: its front matter asks for worker {spec!r}, which this pool lacks ({e})"
        ) from None


def _mcp_prompt(session: Session, name: str, arguments: str) -> Prompted | None:
    from fugu_cli.mcp import McpUnavailable, prompt_arguments, qualified

    mcp = session.mcp
    assert mcp is not None
    for server, catalog in mcp.catalogs(start=True).items():
        for prompt in catalog.prompts:
            if qualified(server, prompt.name) == name:
                try:
                    words = shlex.split(arguments)
                except ValueError:
                    words = arguments.split()
                args = prompt_arguments(prompt, words)
                missing = [a.name for a in prompt.arguments if a.required and a.name not in args]
                if missing:
                    usage = " ".join(f"<{a.name}>" for a in prompt.arguments)
                    raise UsageError(f"/{name} needs {', '.join(missing)}: /{name} {usage}")
                try:
                    return Prompted(mcp.get_prompt(server, prompt.name, args))
                except McpUnavailable as e:
                    raise UsageError(f"/{name}: {e}") from None
    return None
