"""Turns litellm replies (whole responses or stream chunks) into fugu `Completion`s.

Reads attributes or dict keys alike so it works on litellm objects and plain JSON; never imports litellm.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.types import Completion, Message, ToolCall, Usage


class MalformedReply(Exception):
    """A reply we cannot use (no choices, wrong shape); the client retries it."""


class WrongEndpoint(Exception):
    """A reply that no chat endpoint sends (a web page, JSON that is no completion): the worker's api_base
    leads somewhere else, and another attempt would get the same, so it is not retried."""


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def new_call_id() -> str:
    """Some providers (and local servers) send tool calls without ids; the transcript needs unique ones."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _arguments(raw: Any) -> str:
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else json.dumps(raw)


def usage_from(raw: Any) -> Usage:
    """Token counts only; cost is added by the price book."""
    if raw is None:
        return Usage()
    cached = _get(_get(raw, "prompt_tokens_details"), "cached_tokens") or _get(raw, "cache_read_input_tokens")
    return Usage(
        prompt_tokens=int(_get(raw, "prompt_tokens") or 0),
        completion_tokens=int(_get(raw, "completion_tokens") or 0),
        cached_tokens=int(cached or 0),
    )


def completion_from_response(response: Any, worker: str) -> Completion:
    choices = _get(response, "choices")
    if not choices:
        raise MalformedReply("reply had no choices")
    choice = choices[0]
    raw = _get(choice, "message")
    if raw is None:
        raise MalformedReply("reply choice had no message")
    calls = tuple(
        ToolCall(
            id=_get(tc, "id") or new_call_id(),
            name=str(_get(_get(tc, "function"), "name") or ""),
            arguments=_arguments(_get(_get(tc, "function"), "arguments")),
        )
        for tc in _get(raw, "tool_calls") or ()
    )
    content = _get(raw, "content")
    message = Message("assistant", content if content or not calls else None, calls, worker=worker)
    return Completion(
        message,
        usage_from(_get(response, "usage")),
        str(_get(response, "model") or ""),
        _get(choice, "finish_reason"),
    )


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """Accumulates stream chunks: text deltas, tool calls from fragments (keyed by index), final usage."""

    worker: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    chunks: int = 0

    def add(self, chunk: Any) -> str:
        """Takes one chunk; returns its text delta ("" when none)."""
        self.chunks += 1
        self.model = str(_get(chunk, "model") or self.model)
        if _get(chunk, "usage") is not None:
            self.usage = usage_from(_get(chunk, "usage"))
        delta_text = ""
        for choice in _get(chunk, "choices") or ():
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason
            delta = _get(choice, "delta")
            piece = _get(delta, "content")
            if piece:
                self.text.append(piece)
                delta_text += piece
            for tc in _get(delta, "tool_calls") or ():
                self._add_call(tc)
        return delta_text

    def _add_call(self, tc: Any) -> None:
        index = _get(tc, "index")
        key = int(index) if index is not None else len(self.calls)
        part = self.calls.setdefault(key, _PartialCall())
        part.id = part.id or _get(tc, "id")
        fn = _get(tc, "function")
        part.name = part.name or str(_get(fn, "name") or "")
        fragment = _get(fn, "arguments")
        if fragment:
            part.arguments.append(_arguments(fragment))

    def result(self) -> Completion:
        if self.chunks == 0:
            raise MalformedReply("stream ended without any chunk")
        calls = tuple(
            ToolCall(p.id or new_call_id(), p.name, "".join(p.arguments))
            for _, p in sorted(self.calls.items())
        )
        content = "".join(self.text) or None
        return Completion(
            Message("assistant", content, calls, worker=self.worker),
            self.usage,
            self.model,
            self.finish_reason,
        )
