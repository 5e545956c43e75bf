"""Transcript hygiene before a call: the shared transcript mixes workers and providers (DESIGN section 3).

Keeps only fields every OpenAI-compatible provider accepts, keeps tool-call ids and results paired, and never
drops a tool result (an orphan becomes a user message). `clean_transcript` is the rule, on OpenAI-shaped
dicts; `WireTranscript` applies it to a growing transcript of Messages one new message at a time, so a step
costs its new messages, not the history. Never mutates what it is given or what it handed out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from fugu_cli.types import Message

ALLOWED_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}
MISSING_RESULT = "(no result: the call was interrupted before it finished)"


def clean_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drops reasoning/thinking fields, pairs every tool call with a result, keeps orphan results as text."""
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []
    for raw in messages:
        open_calls = _add(out, open_calls, raw)
    _close(out, open_calls)
    return out


def _add(out: list[dict[str, Any]], open_calls: list[str], raw: dict[str, Any]) -> list[str]:
    """Append one message's cleaned form to `out` (closing the calls it leaves unanswered); returns the calls
    still open."""
    msg = {k: v for k, v in raw.items() if k in ALLOWED_KEYS}
    role = msg.get("role")
    if role == "tool":
        call_id = msg.get("tool_call_id")
        if call_id in open_calls:
            open_calls.remove(call_id)
            out.append(msg)
        else:
            out.append(_orphan_as_user(msg))
        return open_calls
    _close(out, open_calls)
    if role == "assistant":
        msg = _clean_assistant(msg)
        open_calls = [tc["id"] for tc in msg.get("tool_calls", ())]
    elif msg.get("content") is None:
        msg["content"] = ""
    out.append(msg)
    return open_calls


class WireTranscript:
    """`clean_transcript` of a transcript that grows between calls. Each call names its Messages; those that
    are the very objects of the last call, in order, are not cleaned again (a compaction or a brief moving
    to the next turn only rebuilds from where the lists differ). Thread-safe; the lists it returns are new,
    their dicts shared: callers must not change them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Message] = []
        self._out: list[dict[str, Any]] = []
        self._marks: list[tuple[int, tuple[str, ...]]] = [(0, ())]  # after k messages: len(out), open calls

    def build(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        with self._lock:
            same, limit = 0, min(len(self._seen), len(messages))
            while same < limit and self._seen[same] is messages[same]:
                same += 1
            size, still_open = self._marks[same]
            del self._out[size:], self._seen[same:], self._marks[same + 1 :]
            open_calls = list(still_open)
            for m in messages[same:]:
                open_calls = _add(self._out, open_calls, m.to_openai())
                self._seen.append(m)
                self._marks.append((len(self._out), tuple(open_calls)))
            out = list(self._out)
        _close(out, open_calls)
        return out


class WireCache:
    """One `WireTranscript` per conversation (known by its first Message object), for a client that serves
    many sessions; the least recently used are forgotten."""

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._wires: OrderedDict[int, tuple[Message, WireTranscript]] = OrderedDict()

    def build(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        if not messages:
            return []
        first = messages[0]
        with self._lock:
            found = self._wires.get(id(first))
            if found is None or found[0] is not first:
                found = (first, WireTranscript())
            self._wires[id(first)] = found
            self._wires.move_to_end(id(first))
            while len(self._wires) > self._size:
                self._wires.popitem(last=False)
        return found[1].build(messages)


def _clean_assistant(msg: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {"id": tc["id"], "type": "function", "function": dict(tc["function"])}
        for tc in msg.get("tool_calls") or ()
    ]
    if calls:
        msg["tool_calls"] = calls
    else:
        msg.pop("tool_calls", None)
        if msg.get("content") is None:
            msg["content"] = ""
    msg.pop("tool_call_id", None)
    return msg


def _close(out: list[dict[str, Any]], open_calls: list[str]) -> None:
    """Providers reject an assistant tool call with no following result, so unanswered calls get one."""
    for call_id in open_calls:
        out.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
    open_calls.clear()


def _orphan_as_user(msg: dict[str, Any]) -> dict[str, Any]:
    label = msg.get("name") or msg.get("tool_call_id") or "tool"
    return {"role": "user", "content": f"[result of {label}]\n{msg.get('content') or ''}"}


CACHE_MARK = {"type": "ephemeral"}


def mark_cache_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic caches the prompt prefix up to each `cache_control` mark (four at most): mark the system
    prompt (stable for the whole session) and the last message (so the next step reads all of this one's
    prompt from the cache). Text content becomes a one-block list, which litellm passes through. Only the
    marked messages are copied."""
    out = list(messages)
    marks = [i for i, m in enumerate(out) if m.get("role") == "system"][:1]
    if out and len(out) - 1 not in marks:
        marks.append(len(out) - 1)
    for i in marks:
        content = out[i].get("content")
        if isinstance(content, str) and content:
            blocks = [{"type": "text", "text": content, "cache_control": dict(CACHE_MARK)}]
            out[i] = {**out[i], "content": blocks}
    return out


def private_copy(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with their own dicts and lists, for a library that may change what it is given."""
    out = []
    for m in messages:
        copy = dict(m)
        if isinstance(copy.get("tool_calls"), list):
            copy["tool_calls"] = [{**tc, "function": dict(tc["function"])} for tc in copy["tool_calls"]]
        if isinstance(copy.get("content"), list):
            copy["content"] = [dict(b) for b in copy["content"]]
        out.append(copy)
    return out
