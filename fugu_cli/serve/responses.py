"""OpenAI's Responses API over the pass-through: a `POST /v1/responses` request becomes a chat-completions
request (input items, instructions, function tools, text format), and the worker's chat reply becomes a
`response` object, or, streamed, the `response.*` events. Pure data mapping.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.serve.params import text_of
from fugu_cli.serve.wire import ApiError, bad_param, new_id, now

# Parameters the Responses API has that a chat request can carry, under the chat name.
_RENAMED = {"max_output_tokens": "max_tokens"}
_SAME = ("model", "temperature", "top_p", "parallel_tool_calls", "user", "stream", "session_id", "metadata")
_ACCEPTED_EMPTY: dict[str, tuple[Any, ...]] = {
    "include": ([],),
    "truncation": ("disabled",),
    "store": (True, False),
    "reasoning": ({},),
}


def to_chat(body: Any) -> dict[str, Any]:
    """The chat-completions request a Responses request stands for."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    for key, value in body.items():
        known = (
            key in _SAME
            or key in _RENAMED
            or key in ("input", "instructions", "tools", "tool_choice", "text")
        )
        if value is None or known:
            continue
        if key in _ACCEPTED_EMPTY and value in _ACCEPTED_EMPTY[key]:
            continue
        raise bad_param(key, f"fugu's /v1/responses does not support '{key}'", "unsupported_parameter")
    chat: dict[str, Any] = {k: body[k] for k in _SAME if body.get(k) is not None}
    chat |= {_RENAMED[k]: body[k] for k in _RENAMED if body.get(k) is not None}
    messages: list[dict[str, Any]] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    messages += _messages(body.get("input"))
    chat["messages"] = messages
    if body.get("tools"):
        chat["tools"] = [_tool(t) for t in body["tools"]]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if fmt and fmt.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif fmt and fmt.get("type") == "json_schema":
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        chat["response_format"] = {"type": "json_schema", "json_schema": spec}
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


def _messages(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_param("input", "'input' must be a string or a non-empty list of input items")
    out: list[dict[str, Any]] = []
    for item in raw:
        if not isinstance(item, dict):
            raise bad_param("input", "each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": _content(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function"}
            call["function"] = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else json.dumps(output)
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":
            raise bad_param("input", f"input items of type {kind!r} are not supported", "unsupported_value")
    return out


def _content(raw: Any) -> Any:
    if isinstance(raw, str) or raw is None:
        return raw or ""
    parts: list[dict[str, Any]] = []
    for part in raw if isinstance(raw, list) else ():
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text") or "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            raise bad_param("input", f"content parts of type {kind!r} are not supported", "unsupported_value")
    return parts


def _tool(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("type") != "function" or not raw.get("name"):
        raise bad_param("tools", "only function tools ({type: function, name, parameters}) are supported")
    fn = {k: raw[k] for k in ("name", "description", "parameters", "strict") if raw.get(k) is not None}
    return {"type": "function", "function": fn}


def _tool_choice(raw: Any) -> Any:
    if isinstance(raw, dict) and raw.get("type") == "function":
        return {"type": "function", "function": {"name": raw.get("name")}}
    return raw


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


def _text_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
    return item | {"arguments": arguments, "status": status}


def envelope(request: Mapping[str, Any], rid: str, created: int) -> dict[str, Any]:
    """The fields of a `response` that echo the request."""
    fmt = (request.get("text") or {}).get("format") if isinstance(request.get("text"), dict) else None
    return {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model"),
        "output": [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": request.get("temperature"),
        "text": {"format": fmt or {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": list(request.get("tools") or []),
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def response_from_chat(chat: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """The `response` object for a whole chat.completion."""
    out = envelope(request, new_id("resp_"), int(chat.get("created") or now()))
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(_text_item(new_id("msg_"), text_of(message["content"])))
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        output.append(
            _call_item(new_id("fc_"), str(call.get("id")), str(fn.get("name")), fn.get("arguments") or "")
        )
    out |= {"output": output, "usage": usage_of(chat.get("usage"))}
    _finish(out, choice.get("finish_reason"))
    if "fugu" in chat:
        out["fugu"] = chat["fugu"]
    return out


def _finish(out: dict[str, Any], finish_reason: str | None) -> None:
    if finish_reason == "length":
        out |= {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    else:
        out["status"] = "completed"


@dataclass
class _Call:
    item_id: str
    call_id: str
    name: str
    output_index: int
    arguments: list[str] = field(default_factory=list)


@dataclass
class ResponseEvents:
    """Chat chunks in, `response.*` events out, each with its `type` and `sequence_number`."""

    request: Mapping[str, Any]
    rid: str = field(default_factory=lambda: new_id("resp_"))
    created: int = field(default_factory=now)
    seq: int = 0
    text: list[str] = field(default_factory=list)
    text_item: str | None = None
    text_index: int = -1
    calls: dict[int, _Call] = field(default_factory=dict)
    items: int = 0
    finish_reason: str | None = None

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
                events += self._text(str(delta["content"]))
            for tc in delta.get("tool_calls") or ():
                events += self._call(tc)
        return events

    def _text(self, piece: str) -> list[dict[str, Any]]:
        events = []
        if self.text_item is None:
            self.text_item, self.text_index = new_id("msg_"), self.items
            self.items += 1
            item = _text_item(self.text_item, "", "in_progress") | {"content": []}
            events.append(self._event("response.output_item.added", output_index=self.text_index, item=item))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": self.text_item, "output_index": self.text_index, "content_index": 0}
            events.append(self._event("response.content_part.added", **where, part=part))
        self.text.append(piece)
        where = {"item_id": self.text_item, "output_index": self.text_index, "content_index": 0}
        return [*events, self._event("response.output_text.delta", **where, delta=piece, logprobs=[])]

    def _call(self, tc: Mapping[str, Any]) -> list[dict[str, Any]]:
        events = []
        index = int(tc.get("index") or 0)
        fn = tc.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            call = _Call(
                new_id("fc_"), str(tc.get("id") or new_id("call_")), str(fn.get("name") or ""), self.items
            )
            self.calls[index] = call
            self.items += 1
            item = _call_item(call.item_id, call.call_id, call.name, "", "in_progress")
            events.append(
                self._event("response.output_item.added", output_index=call.output_index, item=item)
            )
        if fn.get("arguments"):
            call.arguments.append(str(fn["arguments"]))
            where = {"item_id": call.item_id, "output_index": call.output_index}
            events.append(
                self._event("response.function_call_arguments.delta", **where, delta=fn["arguments"])
            )
        return events

    def finish(
        self, chat_usage: Mapping[str, Any] | None, fugu: Mapping[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        output: list[tuple[int, dict[str, Any]]] = []
        if self.text_item is not None:
            text = "".join(self.text)
            where = {"item_id": self.text_item, "output_index": self.text_index, "content_index": 0}
            events.append(self._event("response.output_text.done", **where, text=text, logprobs=[]))
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            events.append(self._event("response.content_part.done", **where, part=part))
            item = _text_item(self.text_item, text)
            events.append(self._event("response.output_item.done", output_index=self.text_index, item=item))
            output.append((self.text_index, item))
        for call in self.calls.values():
            arguments = "".join(call.arguments)
            where = {"item_id": call.item_id, "output_index": call.output_index}
            events.append(self._event("response.function_call_arguments.done", **where, arguments=arguments))
            item = _call_item(call.item_id, call.call_id, call.name, arguments)
            events.append(self._event("response.output_item.done", output_index=call.output_index, item=item))
            output.append((call.output_index, item))
        response = envelope(self.request, self.rid, self.created)
        response |= {
            "output": [item for _, item in sorted(output, key=lambda p: p[0])],
            "usage": usage_of(chat_usage),
        }
        _finish(response, self.finish_reason)
        if fugu:
            response["fugu"] = dict(fugu)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=response)]

    def failed(self, error: ApiError) -> dict[str, Any]:
        response = envelope(self.request, self.rid, self.created) | {"status": "failed"}
        response["error"] = {"code": error.code or "server_error", "message": str(error)}
        return self._event("response.failed", response=response)
