"""`ScriptedLLM`: replays queued replies per worker (or from a shared queue); no network, no litellm.

Powers tests above the litellm adapter and `fugu demo`. A reply is a dict: {"content", "tool_calls": [{"name",
"arguments": dict | raw str}], "usage", "cost_usd", "error", "retryable", "delay_s"}. Records every call it
receives. An "error" reply is the worker giving up on the call (after its retries); with "retryable": true
it is one failed attempt, which the worker-call service retries (taking the worker's next reply).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.errors import ConfigError, Interrupted, ProviderError
from fugu_cli.llm.pricing import price_from_worker
from fugu_cli.types import Completion, Message, ToolCall, Usage, Worker

EXHAUSTED = "(script exhausted)"
SHARED = "*"
ScriptReply = Mapping[str, Any] | str


@dataclass(frozen=True)
class ScriptedCall:
    """One call the scripted LLM received."""

    worker: str
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Mapping[str, Any], ...]


class ScriptedLLM:
    """Implements `fugu_cli.llm.LLM`. Replies for a worker come from its own queue, then the shared one."""

    def __init__(self, replies: Mapping[str, Sequence[ScriptReply]] | Sequence[ScriptReply] = ()) -> None:
        self._queues: dict[str, deque[Mapping[str, Any]]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.calls: list[ScriptedCall] = []
        if isinstance(replies, Mapping):
            for worker, queue in replies.items():
                self.add(*queue, worker=worker)
        else:
            self.add(*replies)

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedLLM:
        """JSON: a list (shared queue), or {worker: [replies], "*": [shared]}, optionally under "replies"."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read the LLM script {path}: {exc}") from exc
        if isinstance(data, dict) and "replies" in data:
            data = data["replies"]
        if not isinstance(data, (list, dict)):
            raise ConfigError(f"LLM script {path} must hold a list of replies or a map of worker -> replies")
        return cls(data)

    def add(self, *replies: ScriptReply, worker: str = SHARED) -> None:
        """Queue replies (a plain string is a text reply) for `worker`, or for anyone when it is "*"."""
        with self._lock:
            queue = self._queues.setdefault(worker, deque())
            queue.extend({"content": r} if isinstance(r, str) else r for r in replies)

    def pending(self, worker: str = SHARED) -> int:
        with self._lock:
            return len(self._queues.get(worker, ()))

    def workers_called(self) -> list[str]:
        return [c.worker for c in self.calls]

    def warm(self, workers: Sequence[Worker] = ()) -> None:
        """Nothing to set up: replies are in memory."""

    def complete(
        self,
        worker: Worker,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        with self._lock:
            self.calls.append(ScriptedCall(worker.name, worker.model, tuple(messages), tuple(tools)))
            reply = self._next(worker.name)
        delay = float(reply.get("delay_s", 0.0))
        if cancel is not None and (cancel.is_set() or (delay and cancel.wait(delay))):
            raise Interrupted(f"interrupted while waiting for {worker.name}")
        if delay and cancel is None:
            threading.Event().wait(delay)
        if reply.get("error") is not None:
            error = str(reply["error"])
            text = f"worker {worker.name} ({worker.model}): {error} (scripted)"
            raise ProviderError(text, worker=worker.name, retryable=bool(reply.get("retryable", False)))
        message = self._message(worker, reply)
        if on_text is not None and message.content:
            for piece in _pieces(message.content):
                on_text(piece)
        usage = _usage(worker, reply, messages, message)
        finish = "tool_calls" if message.tool_calls else "stop"
        return Completion(message, usage, worker.model, finish)

    def _next(self, worker: str) -> Mapping[str, Any]:
        for key in (worker, SHARED):
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        return {"content": EXHAUSTED}

    def _message(self, worker: Worker, reply: Mapping[str, Any]) -> Message:
        calls = []
        for call in reply.get("tool_calls") or ():
            args = call.get("arguments", {})
            raw = args if isinstance(args, str) else json.dumps(args)
            calls.append(ToolCall(call.get("id") or f"call_s{next(self._ids)}", str(call["name"]), raw))
        return Message("assistant", reply.get("content"), tuple(calls), worker=worker.name)


def _pieces(text: str) -> list[str]:
    """Word-sized deltas, so streaming renderers see more than one chunk."""
    return re.findall(r"\s*\S+\s*", text) or [text]


def _usage(worker: Worker, reply: Mapping[str, Any], messages: Sequence[Message], message: Message) -> Usage:
    """Scripted usage when given; otherwise a rough 4-characters-per-token estimate."""
    given = reply.get("usage") or {}
    prompt_chars = sum(len(m.content or "") for m in messages)
    out_chars = len(message.content or "") + sum(len(t.arguments) for t in message.tool_calls)
    usage = Usage(
        prompt_tokens=int(given.get("prompt_tokens", prompt_chars // 4)),
        completion_tokens=int(given.get("completion_tokens", out_chars // 4)),
        cached_tokens=int(given.get("cached_tokens", 0)),
    )
    cost = reply.get("cost_usd")
    if cost is None:
        cost = price_from_worker(worker, usage) or 0.0
    return Usage(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, float(cost))
