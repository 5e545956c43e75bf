"""The request side of OpenAI's Responses API: every field of a `POST /v1/responses` body (openai-python
3.57's `ResponseCreateParams`, and what clients such as Codex add) is read and either sent to the worker
(under its chat-completions name), sent only to the workers whose provider takes it (a reasoning effort,
a prompt-cache key, a native web search), applied by fugu (`store`, `previous_response_id`, the agent
models), or left out with a note that the reply's `x-fugu-dropped` header and the ledger carry. Only what
would change the answer's meaning is refused (`background`, `conversation`, `prompt`).
Pure data mapping: the stored history is the caller's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.serve import resp_items
from fugu_cli.serve.params import ChatRequest, model_kind, parse_chat
from fugu_cli.serve.resp_items import Tools
from fugu_cli.serve.wire import ApiError, bad_param

# Sent to the worker as they are (chat completions has the same parameter).
_SAME = ("model", "temperature", "top_p", "parallel_tool_calls", "user", "stream", "metadata")
_RENAMED = {"max_output_tokens": "max_tokens"}
# Sent only to workers whose provider takes them.
_PER_WORKER = ("prompt_cache_key", "prompt_cache_retention", "safety_identifier", "service_tier")
# Read by fugu itself.
_READ = (
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "text",
    "reasoning",
    "include",
    "top_logprobs",
    "store",
    "previous_response_id",
    "stream_options",
    "truncation",
    "session_id",
    "background",
    "conversation",
    "prompt",
)
# Fields no worker behind chat completions can take: left out, said.
_NOT_SENT = {
    "max_tool_calls": "it caps hosted tools, and no worker runs any",
    "context_management": "chat completions has no server-side context management",
    "client_metadata": "no worker takes a client's metadata",
    "moderation": "fugu runs no moderation",
    "access_programs": "no worker has OpenAI's access programs",
    "image": "no worker generates images here",
    "prompt_cache_options": "chat completions takes prompt_cache_key only",
    "background_options": "fugu answers while the request is open",
}
# Agent models take the conversation; everything else is the agent's own business.
_AGENT_SENT = ("model", "stream", "user", "metadata")
_LOGPROBS = "message.output_text.logprobs"


@dataclass(frozen=True)
class Asked:
    """A Responses request, read: the chat request it stands for (before any stored history is added)."""

    body: dict[str, Any]
    chat: dict[str, Any]  # the chat-completions body, without messages
    instructions: list[dict[str, Any]]  # the system message, if any (never carried to a later response)
    new: list[dict[str, Any]]  # this request's input as chat messages
    items: list[dict[str, Any]]  # this request's input items, as a stored response keeps them
    tools: Tools
    optional: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    store: bool = True
    previous_id: str | None = None

    @property
    def model(self) -> str:
        return str(self.body.get("model") or "")


def read(body: Any) -> Asked:
    """The request, checked: a 400 for what is malformed or would change the answer's meaning."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    _refuse(body)
    notes: list[str] = []
    for key, value in body.items():
        if value is None or key in _SAME or key in _RENAMED or key in _PER_WORKER or key in _READ:
            continue
        why = _NOT_SENT.get(key, "fugu does not know this field")
        notes.append(f"{key}: {why}")
    tools = resp_items.tools(body.get("tools"))
    notes += tools.dropped
    chat: dict[str, Any] = {k: body[k] for k in _SAME if body.get(k) is not None}
    chat |= {_RENAMED[k]: body[k] for k in _RENAMED if body.get(k) is not None}
    if tools.functions:
        chat["tools"] = list(resp_items.allowed(body.get("tool_choice"), tools.functions))
    choice, left = resp_items.tool_choice(body.get("tool_choice"), tools)
    notes += left
    if choice is not None and tools.functions:
        chat["tool_choice"] = choice
    chat |= _text(body.get("text"), notes)
    optional = _optional(body, tools, notes)
    stream_options = body.get("stream_options")
    if isinstance(stream_options, dict) and stream_options.get("include_obfuscation"):
        notes.append("stream_options.include_obfuscation: fugu pads no events")
    if body.get("truncation") == "auto":
        notes.append("truncation auto: a worker refuses an input over its window (fugu-agent compacts)")
    built = resp_items.messages(body.get("input"))
    notes += built.dropped
    instructions = body.get("instructions")
    system = [{"role": "system", "content": str(instructions)}] if instructions else []
    store, previous = body.get("store"), body.get("previous_response_id")
    if store is not None and not isinstance(store, bool):
        raise bad_param("store", "'store' must be a boolean")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise bad_param("previous_response_id", "'previous_response_id' must be a response id")
    return Asked(
        body=body,
        chat=chat,
        instructions=system,
        new=built.out,
        items=resp_items.as_items(body.get("input")),
        tools=tools,
        optional=optional,
        notes=tuple(dict.fromkeys(notes)),
        store=store is not False,
        previous_id=previous,
    )


def _refuse(body: Mapping[str, Any]) -> None:
    if body.get("background"):
        raise bad_param(
            "background",
            "fugu answers while the request is open: send it without background (stream it for a long one)",
            "unsupported_value",
        )
    if body.get("conversation") is not None:
        raise bad_param(
            "conversation",
            "fugu has no Conversations API: chain responses with previous_response_id (fugu stores them)",
            "unsupported_parameter",
        )
    if body.get("prompt") is not None:
        raise bad_param(
            "prompt",
            "fugu keeps no prompt templates: send the prompt's text as instructions or input",
            "unsupported_parameter",
        )
    if body.get("input") is None:
        raise bad_param("input", "'input' is required: a string or a list of input items", "missing")


def _text(raw: Any, notes: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad_param("text", "'text' must be an object ({format, verbosity})")
    out: dict[str, Any] = {}
    fmt = raw.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is not None and kind not in ("text", "json_object", "json_schema"):
        raise bad_param("text.format", "'text.format.type' must be text, json_object or json_schema")
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
    elif kind == "json_schema":
        assert isinstance(fmt, dict)
        if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
            raise bad_param("text.format", "a json_schema format needs a 'name' and a 'schema'")
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    for key in raw:
        if key not in ("format", "verbosity"):
            notes.append(f"text.{key}: fugu does not know this field")
    return out


def _optional(body: Mapping[str, Any], tools: Tools, notes: list[str]) -> dict[str, Any]:
    """The parameters sent only to the workers that take them (the rest are named in `notes`)."""
    optional = {k: body[k] for k in _PER_WORKER if body.get(k) is not None}
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise bad_param("reasoning", "'reasoning' must be an object ({effort, summary})")
    for key, value in (reasoning or {}).items():
        if key == "effort" and value is not None:
            optional["reasoning_effort"] = value
        elif value is not None:
            notes.append(f"reasoning.{key}: chat completions gives no reasoning summaries")
    asked = body.get("text")
    text: Mapping[str, Any] = asked if isinstance(asked, dict) else {}
    if text.get("verbosity") is not None:
        optional["verbosity"] = text["verbosity"]
    include = body.get("include") or []
    if not isinstance(include, list):
        raise bad_param("include", "'include' must be a list")
    for value in include:
        if value == _LOGPROBS:
            optional["logprobs"] = True
        else:
            notes.append(f"include {value}: no worker behind chat completions returns it")
    if body.get("top_logprobs") is not None:
        optional |= {"logprobs": True, "top_logprobs": body["top_logprobs"]}
    if tools.web_search is not None:
        optional["web_search_options"] = tools.web_search
    return optional


def chat_request(asked: Asked, history: Sequence[dict[str, Any]], session: str | None) -> ChatRequest:
    """The chat request: the stored history (items of earlier responses) then this request's input. An
    agent model's session remembers its history itself: only the new input goes to it."""
    mode, worker = model_kind(asked.model.removeprefix("openai/"))
    passing = mode == "pass" or (worker is not None and bool(asked.tools.functions))
    earlier = resp_items.messages(list(history) if passing or session is None else [])
    messages = [*asked.instructions, *earlier.out, *asked.new]
    notes = [*asked.notes, *earlier.dropped]
    if passing:
        body = asked.chat | {"messages": messages}
        if body.get("stream"):
            body["stream_options"] = {"include_usage": True}
        req = parse_chat(body, session)
        return _with(req, asked.optional, notes)
    body = {k: asked.chat[k] for k in _AGENT_SENT if k in asked.chat} | {"messages": messages}
    left = [k for k in asked.chat if k not in _AGENT_SENT and k not in ("tools", "tool_choice")]
    notes += [f"{k}: {asked.model}'s workers choose their own" for k in left]
    notes += [f"{k}: {asked.model} sends no such parameter" for k in asked.optional]
    if asked.chat.get("tools"):
        body["tools"] = asked.chat["tools"]  # for parse_chat's note; the agent never sees them
    req = parse_chat(body, session)
    return _with(req, {}, [*req.notes, *notes])


def _with(req: ChatRequest, optional: dict[str, Any], notes: Sequence[str]) -> ChatRequest:
    return dataclasses.replace(req, optional=optional, notes=tuple(dict.fromkeys([*req.notes, *notes])))
