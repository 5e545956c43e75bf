"""Pass-through calls: a client's own chat-completions request (its messages, tools and parameters) sent to
one worker, the reply handed back in OpenAI's shape, whole or as chunks, with usage and cost.

OpenAI-compatible workers are posted to directly (direct.py); every other provider goes through litellm.
Same retries as the agent's client (`with_retries`); a stream is retried only until its first chunk arrives.
Parameters are never dropped silently: a provider that cannot take one makes a `RequestRejected`.
litellm is reached through `load_litellm` only (prices included). Never prints.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fugu_cli.errors import Interrupted, ProviderError
from fugu_cli.llm.client import ClientConfig, endpoint, load_litellm, with_retries
from fugu_cli.llm.direct import DirectClient, is_openai_compatible
from fugu_cli.llm.parse import usage_from
from fugu_cli.llm.pricing import PriceBook
from fugu_cli.types import Usage, Worker

# What the client may not set: where the call goes and how litellm behaves are fugu's business.
RESERVED = frozenset({"model", "stream", "stream_options", "api_base", "base_url", "api_key", "timeout"})
RESERVED |= {"num_retries", "max_retries", "drop_params", "extra_headers", "custom_llm_provider"}
T = TypeVar("T")
_PARAMS = re.compile(r"parameters?:?\s*\[([^\]]*)\]")


class RequestRejected(ProviderError):
    """The worker refused the request itself (HTTP 400-class: a parameter it cannot take, a bad schema,
    a prompt too long): retrying is pointless. `param` names the parameter when the refusal says which."""

    def __init__(self, message: str, *, worker: str, param: str | None = None) -> None:
        super().__init__(message, worker=worker, retryable=False)
        self.param = param


@dataclass(frozen=True)
class Forwarded:
    """A whole reply: an OpenAI chat.completion object (its `model` is the worker's) and what it cost."""

    body: dict[str, Any]
    usage: Usage
    warning: str | None = None


@dataclass
class ForwardStream:
    """The chunks of a streamed reply as OpenAI chat.completion.chunk objects, usage chunks removed.
    After the last chunk, `usage` holds the reply's usage with its cost."""

    worker: Worker
    _first: dict[str, Any] | None
    _rest: Iterator[Any]
    _prices: PriceBook
    _cancel: threading.Event | None
    usage: Usage = field(default_factory=Usage)
    usage_json: dict[str, Any] | None = None  # the worker's own usage object
    warning: str | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            if self._first is not None:
                yield from self._emit(self._first)
            for raw in self._rest:
                if self._cancel is not None and self._cancel.is_set():
                    raise Interrupted(f"interrupted while streaming from {self.worker.name}")
                yield from self._emit(chunk_json(raw))
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:  # the stream broke after it began: too late to retry or fail over
            raise ProviderError(
                f"worker {self.worker.name} ({self.worker.model}): stream broke: {exc}",
                worker=self.worker.name,
                retryable=False,
            ) from exc
        finally:
            self.close()
        self.usage, self.warning = self._prices.cost(self.worker, self.usage)

    def _emit(self, chunk: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if chunk.get("usage"):
            self.usage, self.usage_json = usage_from(chunk["usage"]), chunk["usage"]
        chunk.pop("usage", None)
        if chunk.get("choices"):
            yield chunk

    def close(self) -> None:
        """Stop reading from the worker (closes its connection)."""
        close = getattr(self._rest, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                pass


class Forwarder:
    """Sends a client's request to a worker. One per server: it only holds configuration and prices."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.prices = PriceBook(load_litellm)
        self.direct = DirectClient(self.config.timeout_s)

    def warm(self) -> None:
        load_litellm()
        self.direct.warm()

    def complete(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> Forwarded:
        """`params`: the request's messages, tools and parameters (no model, no stream)."""
        request = self._request(worker, params)

        def attempt() -> dict[str, Any]:
            if is_openai_compatible(worker):
                return completion_json(self.direct.complete(worker, request))
            return completion_json(load_litellm().completion(**self._litellm(request)))

        body = self._call(worker, attempt, cancel)
        usage, warning = self.prices.cost(worker, usage_from(body.get("usage")))
        return Forwarded(body, usage, warning)

    def stream(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> ForwardStream:
        """Opens the stream and waits for its first chunk (retrying like `complete` until then)."""
        request = self._request(worker, params) | {"stream": True, "stream_options": {"include_usage": True}}

        def attempt() -> tuple[dict[str, Any] | None, Iterator[Any]]:
            if is_openai_compatible(worker):
                chunks: Iterator[Any] = self.direct.stream(worker, request)
            else:
                chunks = iter(load_litellm().completion(**self._litellm(request)))
            first = next(chunks, None)
            return (chunk_json(first) if first is not None else None), chunks

        first, rest = self._call(worker, attempt, cancel)
        return ForwardStream(worker, first, rest, self.prices, cancel)

    def _request(self, worker: Worker, params: Mapping[str, Any]) -> dict[str, Any]:
        request = {k: v for k, v in params.items() if k not in RESERVED}
        return request | {"model": worker.model} | endpoint(worker)

    def _litellm(self, request: dict[str, Any]) -> dict[str, Any]:
        """litellm's own switches: our timeout, our retries, and no parameter dropped in silence."""
        return request | {
            "timeout": self.config.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": False,
        }

    def _call(self, worker: Worker, attempt: Callable[[], T], cancel: threading.Event | None) -> T:
        try:
            return with_retries(worker, self.config, attempt, cancel)
        except ProviderError as e:
            if not e.retryable and _is_rejection(e.__cause__):
                raise RequestRejected(str(e), worker=worker.name, param=_param(e.__cause__)) from e.__cause__
            raise


def _is_rejection(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if name in ("UnsupportedParamsError", "ContextWindowExceededError") or name.startswith("BadRequest"):
        return True
    return status in (400, 413, 422)


def _param(exc: BaseException | None) -> str | None:
    """The parameter a refusal names: the provider's `param` field, or litellm's "parameters: ['x']"."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("param"), str):
            return str(inner["param"])
    found = _PARAMS.search(str(exc))
    if found:
        names = [n.strip(" '\"") for n in found.group(1).split(",") if n.strip(" '\"")]
        return names[0] if names else None
    return None


def _plain(obj: Any) -> Any:
    if obj is None or isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    return dump() if callable(dump) else dict(obj)


def _pruned(value: Any) -> Any:
    """Drop keys whose value is None, at every depth (litellm fills its objects with provider extras)."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _message(raw: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": raw.get("role") or "assistant", "content": raw.get("content")}
    if raw.get("refusal") is not None:
        message["refusal"] = raw["refusal"]
    if raw.get("tool_calls"):
        message["tool_calls"] = [_pruned(_plain(tc)) for tc in raw["tool_calls"]]
    return message


def _delta(raw: Mapping[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if raw.get("role"):
        delta["role"] = raw["role"]
    if "content" in raw and (raw.get("content") is not None or not raw.get("tool_calls")):
        delta["content"] = raw.get("content")
    if raw.get("refusal") is not None:
        delta["refusal"] = raw["refusal"]
    if raw.get("tool_calls"):
        delta["tool_calls"] = [_pruned(_plain(tc)) for tc in raw["tool_calls"]]
    return delta


def completion_json(response: Any) -> dict[str, Any]:
    """A litellm response as the OpenAI chat.completion object it stands for (no provider extras)."""
    raw = _plain(response) or {}
    choices = []
    for c in raw.get("choices") or ():
        c = _plain(c)
        choice: dict[str, Any] = {
            "index": c.get("index", 0),
            "message": _message(_plain(c.get("message")) or {}),
        }
        choice["logprobs"] = _pruned(_plain(c.get("logprobs")))
        choice["finish_reason"] = c.get("finish_reason")
        choices.append(choice)
    body: dict[str, Any] = {"id": raw.get("id"), "object": "chat.completion", "created": raw.get("created")}
    body |= {"model": raw.get("model"), "choices": choices}
    if raw.get("system_fingerprint"):
        body["system_fingerprint"] = raw["system_fingerprint"]
    if raw.get("usage"):
        body["usage"] = _pruned(_plain(raw["usage"]))
    return body


def chunk_json(chunk: Any) -> dict[str, Any]:
    """A litellm stream chunk as an OpenAI chat.completion.chunk object (usage kept when present)."""
    raw = _plain(chunk) or {}
    choices = []
    for c in raw.get("choices") or ():
        c = _plain(c)
        choice: dict[str, Any] = {"index": c.get("index", 0), "delta": _delta(_plain(c.get("delta")) or {})}
        if c.get("logprobs") is not None:
            choice["logprobs"] = _pruned(_plain(c["logprobs"]))
        choice["finish_reason"] = c.get("finish_reason")
        choices.append(choice)
    out: dict[str, Any] = {
        "id": raw.get("id"),
        "object": "chat.completion.chunk",
        "created": raw.get("created"),
    }
    out |= {"model": raw.get("model"), "choices": choices}
    if raw.get("system_fingerprint"):
        out["system_fingerprint"] = raw["system_fingerprint"]
    if raw.get("usage"):
        out["usage"] = _pruned(_plain(raw["usage"]))
    return out
