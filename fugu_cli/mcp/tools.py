"""MCP servers' tools as registry tools (`mcp__<server>__<tool>`, the server's own JSON schema), and the
permission check each call passes: deny rules always refuse; in read-only mode only a tool its server
annotates read-only runs; otherwise allow rules, the mode and the user decide, as for a shell command.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fugu_cli.mcp.catalog import Catalog, ToolInfo, object_schema, qualified
from fugu_cli.mcp.manager import McpManager, McpUnavailable
from fugu_cli.tools import Part
from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.tools.registry import Tool
from fugu_cli.types import Image

MAX_DESCRIPTION = 2000


class McpTools:
    """A registry source: the tools of every usable server, the same `Tool` objects while nothing changes."""

    def __init__(self, manager: McpManager) -> None:
        self.manager = manager
        self._built: dict[str, tuple[Catalog, list[Tool]]] = {}

    def tools(self) -> Sequence[Tool]:
        out: list[Tool] = []
        for server, catalog in self.manager.catalogs(start=True).items():
            built = self._built.get(server)
            if built is None or built[0] is not catalog:
                built = (catalog, [_tool(self.manager, server, info) for info in catalog.tools])
                self._built[server] = built
            out += built[1]
        return out


def _tool(manager: McpManager, server: str, info: ToolInfo) -> Tool:
    name = qualified(server, info.name)

    def call(inv: Invocation, **arguments: Any) -> str:
        gate(inv, name, info.read_only, arguments)
        try:
            text, is_error, images = manager.call_tool(server, info.name, arguments, inv.ctx.cancel)
        except McpUnavailable as e:
            raise ToolFailed(str(e)) from None
        finally:
            for notice in manager.take_notices():
                if inv.ctx.notify is not None:
                    inv.ctx.notify(notice)
        if is_error:
            raise ToolFailed(text)
        inv.images.extend(Image(mime, data, f"{name} image") for mime, data in images)
        return text

    description = (info.description or info.name)[:MAX_DESCRIPTION]
    return Tool(
        name=name,
        kind="exec",
        func=call,
        description=f"{description} (tool {info.name} of the MCP server {server})",
        params=(),
        input_schema=object_schema(info.input_schema),
    )


def gate(inv: Invocation, name: str, read_only: bool, arguments: dict[str, Any]) -> None:
    """Refuse or ask as the policy says; a read-only tool passes read-only mode (deny rules still hold)."""
    policy = inv.ctx.policy
    if read_only and policy.mode == "read-only" and not policy.denies(name):
        return
    shown = json.dumps(arguments, ensure_ascii=False)
    summary = f"{name} {shown if len(shown) <= 80 else shown[:77] + '...'}"
    inv.gate([Part(name)], summary, json.dumps(arguments, ensure_ascii=False, indent=2))
