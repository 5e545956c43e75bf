"""A chat-completions request, checked the way OpenAI checks it: which model kind it asks for, its messages,
and every parameter either accepted (forwarded to the worker, or applied to the agent's answer) or refused
with a 400 naming it. Never ignored. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fugu_cli.serve.wire import AGENT_MODELS, PASS_MODEL, ApiError, bad_param

Mode = Literal["pass", "agent", "ultra"]
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
ROLE_ALIASES = {"developer": "system", "function": "tool"}  # OpenAI's newer and older names for two roles
# What the agent models take besides messages: the rest is sampling the agent's workers choose themselves.
AGENT_KEYS = frozenset({"model", "messages", "stream", "stream_options", "user", "metadata", "store"})
AGENT_KEYS |= {"session_id", "response_format", "stop", "n"}
# A client that always sends its own tools still reaches fugu's agent with an agent model: they are left out.
CLIENT_TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")
FUGU_KEYS = frozenset({"session_id"})  # fugu's own extensions, never sent to a worker


@dataclass(frozen=True)
class ChatRequest:
    model: str  # as the client named it, without an "openai/" prefix
    mode: Mode
    worker: str | None  # fugu/<worker>: forced
    messages: tuple[dict[str, Any], ...]
    params: dict[str, Any] = field(default_factory=dict)  # for the worker: tools and parameters
    stream: bool = False
    include_usage: bool = False
    session: str | None = None  # a server-issued session id (header X-Fugu-Session or body session_id)
    stop: tuple[str, ...] = ()
    response_format: dict[str, Any] | None = None
    fingerprint: str = ""  # the request's content, to recognise a repeated agent turn ("" passed through)
    optional: dict[str, Any] = field(default_factory=dict)  # sent only to workers that take them
    notes: tuple[str, ...] = ()  # what fugu could not honour, said in the reply's header and the ledger

    @property
    def task(self) -> str:
        """The last user message's text (an agent turn's task)."""
        last = next((m for m in reversed(self.messages) if m.get("role") == "user"), None)
        return text_of(last.get("content")) if last else ""


def parse_chat(body: Any, header_session: str | None = None) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param(
            "model", "missing 'model': use fugu, fugu-agent, fugu-ultra or fugu/<worker>", "missing"
        )
    name = model.removeprefix("openai/")
    mode, worker = model_kind(name)
    messages = _messages(body.get("messages"))
    stream = _bool(body, "stream")
    include_usage = _stream_options(body, stream)
    notes: list[str] = []
    if body.get("tools") and (mode == "pass" or worker is not None):
        mode = "pass"  # the client's own tools: its agent loop, our routing (fugu/<worker>: that worker)
    elif mode != "pass":
        notes += ignored_tools(body, name)
        body = {k: v for k, v in body.items() if k not in CLIENT_TOOL_KEYS}
        _agent_checks(body, name)
    params = {k: v for k, v in body.items() if k not in FUGU_KEYS and k not in ("model", "stream")}
    params.pop("stream_options", None)
    _check_common(body)
    session = header_session or body.get("session_id")
    if session is not None and not isinstance(session, str):
        raise bad_param("session_id", "'session_id' must be a string (a session id fugu issued)")
    return ChatRequest(
        model=name,
        mode=mode,
        worker=worker,
        messages=tuple(messages),
        params=params,
        stream=stream,
        include_usage=include_usage,
        session=session or None,
        stop=_stop(body.get("stop")),
        response_format=_response_format(body.get("response_format")),
        fingerprint=fingerprint(body) if mode != "pass" else "",
        notes=tuple(notes),
    )


def ignored_tools(body: Mapping[str, Any], model: str) -> list[str]:
    """The note for an agent model's request that brought the client's own tools."""
    tools = body.get("tools") or []
    if not tools:
        return []
    names = [
        str(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
        for t in tools
        if isinstance(t, dict)
    ]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return [
        f"tools: {model} runs fugu's own agent with its own tools, so the client's tools ({shown}) were "
        "not offered to it"
    ]


def model_kind(name: str) -> tuple[Mode, str | None]:
    if name == PASS_MODEL:
        return "pass", None
    if name in AGENT_MODELS:
        return ("ultra" if name == "fugu-ultra" else "agent"), None
    if name.startswith("fugu/") and name != "fugu/":
        return "agent", name.removeprefix("fugu/")
    raise ApiError(
        404,
        f"The model {name!r} does not exist: use fugu, fugu-agent, fugu-ultra or fugu/<worker> "
        "(GET /v1/models lists them)",
        code="model_not_found",
        param="model",
    )


def fingerprint(body: Mapping[str, Any]) -> str:
    """The request's content, whatever order its keys came in; `stream` does not change what is asked."""
    content = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    return hashlib.blake2b(json.dumps(content, sort_keys=True).encode(), digest_size=16).hexdigest()


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text") for p in content if isinstance(p, dict) and "text" in p)
        return "\n".join(str(p) for p in parts if p)
    raise bad_param("messages", "message content must be a string or a list of content parts")


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise bad_param("messages", "'messages' must be a non-empty list of message objects")
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise bad_param(f"messages[{i}]", f"messages[{i}] must be an object")
        if m.get("role") not in ROLES:
            raise bad_param(
                f"messages[{i}].role", f"messages[{i}].role must be one of {', '.join(sorted(ROLES))}"
            )
        text_of(m.get("content"))
    return raw


def _bool(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise bad_param(key, f"'{key}' must be a boolean")
    return bool(value)


def _stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise bad_param("stream_options", "'stream_options' is only allowed when 'stream' is true")
    if not isinstance(options, dict):
        raise bad_param("stream_options", "'stream_options' must be an object")
    return _bool(options, "include_usage")


def _agent_checks(body: Mapping[str, Any], model: str) -> None:
    for key, value in body.items():
        if key not in AGENT_KEYS and value not in (None, []):
            raise bad_param(
                key,
                f"{model} does not take '{key}': its workers choose their own sampling and tools. "
                f"Use model fugu (the pass-through) to send '{key}' to the worker.",
                "unsupported_parameter",
            )
    n = body.get("n")
    if n is not None and n != 1:
        raise bad_param("n", f"{model} gives one answer per turn: 'n' must be 1", "unsupported_value")
    if not any(m.get("role") == "user" and text_of(m.get("content")).strip() for m in body["messages"]):
        raise bad_param("messages", "'messages' has no user message with text: nothing to do")


def _check_common(body: Mapping[str, Any]) -> None:
    """The parameters OpenAI checks before any model runs; a worker checks the rest."""
    n = body.get("n")
    if n is not None and (not _is_int(n) or not 1 <= n <= 128):
        raise bad_param("n", "'n' must be an integer from 1 to 128")
    for key in ("max_tokens", "max_completion_tokens"):
        value = body.get(key)
        if value is not None and (not _is_int(value) or value < 1):
            raise bad_param(key, f"'{key}' must be a positive integer")
    temperature = body.get("temperature")
    if temperature is not None and (not _is_number(temperature) or not 0 <= temperature <= 2):
        raise bad_param("temperature", "'temperature' must be a number from 0 to 2")
    top_p = body.get("top_p")
    if top_p is not None and (not _is_number(top_p) or not 0 <= top_p <= 1):
        raise bad_param("top_p", "'top_p' must be a number from 0 to 1")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise bad_param("seed", "'seed' must be an integer")
    tools = body.get("tools")
    if tools is not None and (
        not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") for t in tools)
    ):
        raise bad_param("tools", "'tools' must be a list of tool objects, each with a 'type'")
    if body.get("tool_choice") not in (None, "none", "auto", "required") and not isinstance(
        body.get("tool_choice"), dict
    ):
        raise bad_param("tool_choice", "'tool_choice' must be none, auto, required or a tool object")


def _stop(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    stops = [raw] if isinstance(raw, str) else raw
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 4:
        raise bad_param("stop", "'stop' must be a string or a list of at most 4 non-empty strings")
    return tuple(stops)


def _response_format(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        raise bad_param("response_format", "'response_format.type' must be text, json_object or json_schema")
    if kind == "json_schema":
        spec = raw.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise bad_param("response_format", "'response_format.json_schema' needs a 'name' and a 'schema'")
    return None if kind == "text" else dict(raw)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
