"""Which session a request belongs to when it names none: conversations are recognised by their prefix.

A client that runs its own loop resends the whole conversation each call: the messages it sent before plus the
reply it got (and its tool results). Each message's digest chains onto the previous one, so a request's
longest known prefix is found in one pass. Bounded: the oldest prefixes are forgotten first.
Pure and thread-safe.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from fugu_cli.serve.params import ROLE_ALIASES, text_of

MAX_PREFIXES = 50_000


def _digest(previous: bytes, message: Mapping[str, Any]) -> bytes:
    """The digest of a conversation that ends with `message`, `previous` that of the messages before it.
    What identifies a message whatever a client's serializer does (null vs "" content, key order): its role,
    text, tool calls (how many; each one's id, name and arguments) and tool call id, each tagged and
    length-prefixed (nothing to escape)."""
    role = message.get("role")
    role = ROLE_ALIASES.get(str(role), role)
    try:
        content = text_of(message.get("content"))
    except Exception:
        content = json.dumps(message.get("content"), sort_keys=True)
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    parts = [previous, _part(role), _part(content), len(calls).to_bytes(8, "little")]
    for c in calls:
        fn = c.get("function") or {}
        parts += (_part(c.get("id")), _part(fn.get("name")), _part(fn.get("arguments")))
    parts.append(_part(message.get("tool_call_id")))
    return hashlib.sha256(b"".join(parts)).digest()[:16]  # CPUs with SHA extensions: 3x blake2b's speed


def _part(value: Any) -> bytes:
    """`value` as a tag (absent, text, other JSON), then its length and bytes."""
    if value is None:
        return b"n"
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")  # JSON may carry a lone surrogate
        return b"s" + len(data).to_bytes(8, "little") + data
    data = json.dumps(value, sort_keys=True).encode()
    return b"j" + len(data).to_bytes(8, "little") + data


def chain(messages: Sequence[Mapping[str, Any]], start: bytes = b"") -> list[bytes]:
    """digests[i] identifies messages[: i + 1]."""
    out: list[bytes] = []
    digest = start
    for m in messages:
        digest = _digest(digest, m)
        out.append(digest)
    return out


class Conversations:
    """Prefix digest -> session id, least recently used forgotten first."""

    def __init__(self, limit: int = MAX_PREFIXES) -> None:
        self.limit = limit
        self._known: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()

    def find(self, digests: Sequence[bytes]) -> tuple[str, int] | None:
        """(session id, length of the prefix it knows) for the longest known prefix; None if none is."""
        with self._lock:
            for i in range(len(digests) - 1, -1, -1):
                sid = self._known.get(digests[i])
                if sid is not None:
                    self._known.move_to_end(digests[i])
                    return sid, i + 1
        return None

    def remember(self, digest: bytes, sid: str) -> None:
        with self._lock:
            self._known[digest] = sid
            self._known.move_to_end(digest)
            while len(self._known) > self.limit:
                self._known.popitem(last=False)

    def __len__(self) -> int:
        return len(self._known)
