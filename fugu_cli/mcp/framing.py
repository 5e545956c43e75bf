"""Newline-delimited JSON-RPC from a stdio MCP server, read in bounded memory.

A message up to `MAX_MESSAGE` bytes is read whole (a tool's long answer then passes through the registry's
`bound`, like any tool output). A longer one is drained without being kept, and becomes a JSON-RPC error for
the request it answered, so the server stays usable and the model reads why. Imports no MCP SDK.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from typing import Any

MAX_MESSAGE = 128 * 1024 * 1024
_CHUNK = 1 << 20
_EDGE = 8192  # how much of an oversized message's head and tail is kept to find its id
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.){0,200}")')


@dataclass
class TooLong:
    """A message over the limit: its size, and its first and last bytes (where its `id` is)."""

    size: int = 0
    head: bytes = b""
    tail: bytearray = field(default_factory=bytearray)

    def add(self, piece: bytes | bytearray) -> None:
        self.size += len(piece)
        if len(self.head) < _EDGE:
            self.head += bytes(piece[: _EDGE - len(self.head)])
        self.tail += piece[-_EDGE:]
        del self.tail[:-_EDGE]

    def error(self, in_flight: Collection[Any], limit: int = MAX_MESSAGE) -> dict[str, Any] | None:
        """The JSON-RPC error that answers the request this message answered, or None if that is unknown."""
        request_id = self._request_id(in_flight)
        if request_id is None:
            return None
        message = (
            f"the server's answer was {self.size / 1e6:.0f} MB, over the {limit // (1024 * 1024)} MB fugu "
            "reads from an MCP server, and was dropped; ask the tool for less (a narrower query, a page)"
        )
        return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": message}}

    def _request_id(self, in_flight: Collection[Any]) -> Any:
        found = [json.loads(m.group(1)) for m in _ID.finditer(self.head)]
        found += [json.loads(m.group(1)) for m in reversed(list(_ID.finditer(bytes(self.tail))))]
        for candidate in found:  # the SDKs put the id before the result (Python) or after it (TypeScript)
            if candidate in in_flight:
                return candidate
        return next(iter(in_flight)) if len(in_flight) == 1 else None


async def read_messages(
    reader: asyncio.StreamReader, limit: int = MAX_MESSAGE
) -> AsyncIterator[bytearray | TooLong]:
    """Each line the server writes (without its newline), or a `TooLong` for one over `limit` bytes."""
    line = bytearray()
    over: TooLong | None = None
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if over is not None:
                over.add(piece)
            elif len(line) + len(piece) > limit:
                over = TooLong()
                over.add(line)
                over.add(piece)
                line = bytearray()
            else:
                line += piece
            if end < 0:
                break
            yield over if over is not None else line
            line, over, start = bytearray(), None, end + 1
