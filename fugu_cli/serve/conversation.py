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

from fugu_cli.serve.params import text_of

MAX_PREFIXES = 50_000


def _canonical(message: Mapping[str, Any]) -> str:
    """What identifies a message whatever a client's serializer does (null vs "" content, key order)."""
    role = message.get("role")
    role = {"developer": "system", "function": "tool"}.get(str(role), role)
    calls = [
        (c.get("id"), (c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
        for c in message.get("tool_calls") or ()
        if isinstance(c, dict)
    ]
    try:
        content = text_of(message.get("content"))
    except Exception:
        content = json.dumps(message.get("content"), sort_keys=True)
    return json.dumps([role, content, calls, message.get("tool_call_id")])


def chain(messages: Sequence[Mapping[str, Any]], start: bytes = b"") -> list[bytes]:
    """digests[i] identifies messages[: i + 1]."""
    out: list[bytes] = []
    digest = start
    for m in messages:
        digest = hashlib.blake2b(digest + _canonical(m).encode(), digest_size=16).digest()
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
