"""The output side of the Responses API: a worker's chat reply (or an agent turn's answer) as a `response`
object, or, streamed, as the `response.*` events in OpenAI's order: created, in_progress, then for each
output item in turn its `output_item.added`, its deltas, its `done` events and `output_item.done` (an item
is closed before the next one opens), then `completed` (or `incomplete`, `failed`).
Pure data mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.serve.params import text_of
from fugu_cli.serve.resp_items import Tools
from fugu_cli.serve.wire import ApiError, new_id, now


def usage_of(chat_usage: Mapping[str, Any] | None) -> dict[str, Any]:
    u = chat_usage or {}
    prompt, completion = int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0)
    cached = int((u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def text_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def envelope(request: Mapping[str, Any], rid: str, created: int) -> dict[str, Any]:
    """The fields of a `response` that echo the request."""
    fmt = (request.get("text") or {}).get("format") if isinstance(request.get("text"), dict) else None
    asked = request.get("reasoning")
    reasoning: Mapping[str, Any] = asked if isinstance(asked, dict) else {}
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "model": request.get("model"),
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "prompt_cache_key": request.get("prompt_cache_key"),
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "safety_identifier": request.get("safety_identifier"),
        "service_tier": "default",
        "store": request.get("store") is not False,
        "temperature": request.get("temperature"),
        "text": {"format": fmt or {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": list(request.get("tools") or []),
        "top_logprobs": request.get("top_logprobs"),
        "top_p": request.get("top_p"),
        "truncation": request.get("truncation") or "disabled",
        "usage": None,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def finished(out: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
    if finish_reason == "length":
        out |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    else:
        out["status"] = "completed"
    return out


def response_from_chat(
    chat: Mapping[str, Any], request: Mapping[str, Any], tools: Tools, rid: str | None = None
) -> dict[str, Any]:
    """The `response` object for a whole chat.completion."""
    out = envelope(request, rid or new_id("resp_"), int(chat.get("created") or now()))
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(text_item(new_id("msg_"), text_of(message["content"])))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        name, arguments = str(fn.get("name")), fn.get("arguments") or ""
        output.append(tools.item(new_id("fc_"), str(call.get("id")), name, arguments))
    out |= {"output": output, "usage": usage_of(chat.get("usage"))}
    finished(out, choice.get("finish_reason"))
    if "fugu" in chat:
        out["fugu"] = chat["fugu"]
    return out


@dataclass
class _Open:
    """The output item being streamed."""

    index: int
    item_id: str
    kind: str  # "text" or "call"
    pieces: list[str] = field(default_factory=list)
    call_id: str = ""
    name: str = ""
    chat_index: int = 0  # the chat tool call's index


@dataclass
class ResponseEvents:
    """Chat chunks in, `response.*` events out, each with its `type` and `sequence_number`."""

    request: Mapping[str, Any]
    tools: Tools = field(default_factory=Tools)
    rid: str = field(default_factory=lambda: new_id("resp_"))
    created: int = field(default_factory=now)
    seq: int = 0
    output: list[dict[str, Any]] = field(default_factory=list)
    current: _Open | None = None
    finish_reason: str | None = None
    final: dict[str, Any] | None = None  # the whole `response` once finished (what a stored one keeps)

    def _event(self, kind: str, **data: Any) -> dict[str, Any]:
        self.seq += 1
        return {"type": kind, "sequence_number": self.seq - 1, **data}

    def start(self, fugu: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        response = envelope(self.request, self.rid, self.created) | ({"fugu": dict(fugu)} if fugu else {})
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def feed(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events += self.text(str(delta["content"]))
            for tc in delta.get("tool_calls") or ():
                events += self._call(tc)
        return events

    def text(self, piece: str) -> list[dict[str, Any]]:
        events = []
        if self.current is None or self.current.kind != "text":
            events += self._close()
            self.current = _Open(len(self.output), new_id("msg_"), "text")
            item = text_item(self.current.item_id, "", "in_progress") | {"content": []}
            events.append(
                self._event("response.output_item.added", output_index=self.current.index, item=item)
            )
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(self._event("response.content_part.added", **_where(self.current), part=part))
        self.current.pieces.append(piece)
        delta = self._event("response.output_text.delta", **_where(self.current), delta=piece, logprobs=[])
        return [*events, delta]

    def _call(self, tc: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = []
        index = int(tc.get("index") or 0)
        fn = tc.get("function") or {}
        current = self.current
        if current is None or current.kind != "call" or current.chat_index != index:
            events += self._close()
            call_id, name = str(tc.get("id") or new_id("call_")), str(fn.get("name") or "")
            current = self.current = _Open(len(self.output), new_id("fc_"), "call", [], call_id, name, index)
            if self.tools.streams_arguments(name):
                item = self.tools.item(current.item_id, call_id, name, "") | {"status": "in_progress"}
                events.append(
                    self._event("response.output_item.added", output_index=current.index, item=item)
                )
        if fn.get("arguments"):
            current.pieces.append(str(fn["arguments"]))
            if self.tools.streams_arguments(current.name):
                where = _where(current, content=False)
                events.append(
                    self._event("response.function_call_arguments.delta", **where, delta=fn["arguments"])
                )
        return events

    def _close(self) -> list[dict[str, Any]]:
        """The `done` events of the item being streamed (none is open after this)."""
        current, self.current = self.current, None
        if current is None:
            return []
        joined = "".join(current.pieces)
        events = []
        if current.kind == "text":
            item = text_item(current.item_id, joined)
            events.append(
                self._event("response.output_text.done", **_where(current), text=joined, logprobs=[])
            )
            events.append(
                self._event("response.content_part.done", **_where(current), part=item["content"][0])
            )
        else:
            item = self.tools.item(current.item_id, current.call_id, current.name, joined)
            if self.tools.streams_arguments(current.name):
                done = "response.function_call_arguments.done"
                where = _where(current, content=False)
                events.append(self._event(done, **where, name=item["name"], arguments=joined))
            else:
                events += self._whole_call(item)
        events.append(self._event("response.output_item.done", output_index=current.index, item=item))
        self.output.append(item)
        return events

    def _whole_call(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """A custom or shell call, announced once its arguments are whole (they are reshaped first)."""
        index = len(self.output)  # the item is appended after its events
        added = (
            item | {"status": "in_progress"} | ({"input": ""} if item["type"] == "custom_tool_call" else {})
        )
        events = [self._event("response.output_item.added", output_index=index, item=added)]
        if item["type"] == "custom_tool_call":
            where = {"item_id": item["id"], "output_index": index}
            events.append(self._event("response.custom_tool_call_input.delta", **where, delta=item["input"]))
            events.append(self._event("response.custom_tool_call_input.done", **where, input=item["input"]))
        return events

    def finish(
        self, chat_usage: Mapping[str, Any] | None, fugu: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        events = self._close()
        response = envelope(self.request, self.rid, self.created)
        response |= {"output": list(self.output), "usage": usage_of(chat_usage)}
        finished(response, self.finish_reason)
        if fugu:
            response["fugu"] = dict(fugu)
        self.final = response
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=response)]

    def failed(self, error: ApiError) -> dict[str, Any]:
        response = envelope(self.request, self.rid, self.created) | {"status": "failed"}
        response["error"] = {"code": error.code or "server_error", "message": str(error)}
        return self._event("response.failed", response=response)


def _where(item: _Open, content: bool = True) -> dict[str, Any]:
    where = {"item_id": item.item_id, "output_index": item.index}
    return where | ({"content_index": 0} if content else {})
