"""Pass-through calls: a client's own chat-completions request (its messages, tools and parameters) sent to
one worker, the reply handed back in OpenAI's shape, whole or as chunks, with usage and cost.

One attempt per call, watched like the agent's (attempt.py): cancel, and the first-byte limit on a worker
that takes the request and stays silent. Retrying and failing over are the worker-call service's
(fugu_cli/calls). OpenAI-compatible workers are posted to directly (direct.py), and streamed even when the
client asked for a whole reply (assembled here), so a silent one is cut as in the agent; every other provider
goes through litellm. `acomplete` and `astream` are the same attempts made from an event loop (loop_http.py;
OpenAI-compatible workers reached without a proxy only). Parameters are never dropped silently: a provider
that cannot take one makes a `RequestRejected`. litellm is reached through `load_litellm` only (prices
included). Never prints.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fugu_cli.errors import Interrupted, ProviderError, RequestRejected
from fugu_cli.llm.attempt import Signals, silent, watched
from fugu_cli.llm.client import ClientConfig, endpoint, load_litellm, price_book
from fugu_cli.llm.direct import AsyncDirect, DirectClient, is_openai_compatible
from fugu_cli.llm.faults import attempt_error
from fugu_cli.llm.parse import MalformedReply, usage_from
from fugu_cli.llm.pricing import PriceBook
from fugu_cli.types import Usage, Worker

__all__ = [
    "AsyncForwardStream",
    "ForwardStream",
    "Forwarded",
    "Forwarder",
    "RequestRejected",
    "chunk_json",
    "completion_json",
]

# What the client may not set: where the call goes and how litellm behaves are fugu's business.
RESERVED = frozenset({"model", "stream", "stream_options", "api_base", "base_url", "api_key", "timeout"})
RESERVED |= {"num_retries", "max_retries", "drop_params", "extra_headers", "custom_llm_provider"}
# Asked of a whole reply, these cannot be rebuilt from a stream's chunks: such a request is asked whole
_WHOLE_ONLY = ("logprobs", "top_logprobs")
T = TypeVar("T")


@dataclass(frozen=True)
class Forwarded:
    """A whole reply: an OpenAI chat.completion object (its `model` is the worker's) and what it cost."""

    body: dict[str, Any]
    usage: Usage
    warning: str | None = None


def _broke(worker: Worker, exc: Exception) -> ProviderError:
    return ProviderError(
        f"worker {worker.name} ({worker.model}): stream broke: {exc}", worker=worker.name, retryable=False
    )


class _Chunks:
    """What both streams do with each chunk: keep its usage (and cost), pass on those with choices."""

    usage: Usage
    usage_json: dict[str, Any] | None

    def _emit(self, chunk: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if chunk.get("usage"):
            self.usage, self.usage_json = usage_from(chunk["usage"]), chunk["usage"]
        chunk.pop("usage", None)
        if chunk.get("choices"):
            yield chunk


@dataclass
class ForwardStream(_Chunks):
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
            raise _broke(self.worker, exc) from exc
        finally:
            self.close()
        self.usage, self.warning = self._prices.cost(self.worker, self.usage)

    def close(self) -> None:
        """Stop reading from the worker (closes its connection)."""
        close = getattr(self._rest, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                pass


@dataclass
class AsyncForwardStream(_Chunks):
    """`ForwardStream` read from an event loop (`Forwarder.astream`): the chunks as they come, usage chunks
    removed; after the last one `usage` holds the reply's usage with its cost. Closing it (`aclose`, also
    when it is left early) closes the worker's connection."""

    worker: Worker
    _first: dict[str, Any] | None
    _rest: AsyncIterator[dict[str, Any]]
    _prices: PriceBook
    usage: Usage = field(default_factory=Usage)
    usage_json: dict[str, Any] | None = None  # the worker's own usage object
    warning: str | None = None

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        try:
            if self._first is not None:
                for chunk in self._emit(self._first):
                    yield chunk
            async for raw in self._rest:
                for chunk in self._emit(chunk_json(raw)):
                    yield chunk
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:  # the stream broke after it began: too late to retry or fail over
            raise _broke(self.worker, exc) from exc
        finally:
            await self.aclose()
        self.usage, self.warning = self._prices.cost(self.worker, self.usage)

    async def aclose(self) -> None:
        """Stop reading from the worker (closes its connection unless the reply was read to its end)."""
        close = getattr(self._rest, "aclose", None)
        if close is not None:
            await close()


class Forwarder:
    """Sends a client's request to a worker, one attempt a call. One per server: it only holds configuration
    and prices."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.prices = price_book(self.config)
        self.direct = DirectClient(self.config.timeout_s)
        self.adirect = AsyncDirect(self.config.timeout_s)

    def warm(self, pool: Sequence[Worker] = ()) -> None:
        """Open the threads' HTTP client, and import litellm (about 3 s and 150 MiB) when a call to a worker
        of `pool` may need it: to translate it (not OpenAI-compatible), or to price its reply (all of them
        when no pool is given). Not later, in the event loop, where every other request would wait."""
        self.direct.warm()
        if not pool or any(not is_openai_compatible(w) or self.prices.may_need_table(w) for w in pool):
            load_litellm()

    def complete(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> Forwarded:
        """`params`: the request's messages, tools and parameters (no model, no stream)."""
        request = self._request(worker, params)
        streamed = self._streams_whole(params) and is_openai_compatible(worker)

        def body(signals: Signals) -> dict[str, Any]:
            signals.sent(streamed)
            if streamed:
                return _gathered(self.direct.stream(worker, request | _STREAM), signals)
            if is_openai_compatible(worker):
                return completion_json(self.direct.complete(worker, request))
            return completion_json(load_litellm().completion(**self._litellm(request)))

        reply = self._attempt(worker, body, cancel)
        usage, warning = self.prices.cost(worker, usage_from(reply.get("usage")))
        return Forwarded(reply, usage, warning)

    def in_loop(self, pool: Sequence[Worker], params: Mapping[str, Any]) -> bool:
        """Whether a whole reply to `params` can be asked of any worker of `pool` from the event loop
        (`acomplete`): each is OpenAI-compatible, reached without a proxy and asked for a stream, for one
        choice."""
        return self._streams_whole(params) and self.streams_in_loop(pool)

    def _streams_whole(self, params: Mapping[str, Any]) -> bool:
        """Whether a whole reply to `params` is asked of an OpenAI-compatible worker as a stream (so that a
        silent one is cut): streaming is on, one choice, nothing only a whole reply carries."""
        one = (params.get("n") or 1) == 1
        return self.config.stream and one and not any(params.get(k) for k in _WHOLE_ONLY)

    async def acomplete(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> Forwarded:
        """`complete` from the event loop, for the requests `in_loop` accepts: the same request, first-byte
        limit (the status line), faults and reply. A client that leaves cancels the task that awaits it."""
        try:
            response = await self._aopen(worker, params, cancel)
            chunks = await self.adirect.read_chunks(response)
            if not chunks:
                raise MalformedReply("the stream ended before its first chunk")
            reply = whole_from_chunks([chunk_json(c) for c in chunks])
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:
            raise attempt_error(worker, exc, self.config.timeout_s) from exc
        usage, warning = self.prices.cost(worker, usage_from(reply.get("usage")))
        return Forwarded(reply, usage, warning)

    async def _aopen(self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None) -> Any:
        """The worker's streamed response once its status line came, within the first-byte limit."""
        import asyncio

        if cancel is not None and cancel.is_set():
            raise Interrupted(f"interrupted while waiting for {worker.name}")
        limit = self.config.first_byte_timeout_s
        try:
            async with asyncio.timeout(limit) as first_byte:
                return await self.adirect.open_stream(worker, self._request(worker, params) | _STREAM)
        except TimeoutError:
            if first_byte.expired():
                raise silent(worker, limit) from None
            raise

    def streams_in_loop(self, pool: Sequence[Worker]) -> bool:
        """Whether a stream can be asked of any worker of `pool` from the event loop (`astream`): each is
        OpenAI-compatible and reached without a proxy."""
        return all(is_openai_compatible(w) and self.adirect.reaches(w) for w in pool)

    async def astream(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> AsyncForwardStream:
        """`stream` from the event loop, for OpenAI-compatible workers: the same request, first-byte limit
        (the status line), faults and chunks; it returns once the first chunk came, so that a worker that
        fails before it can still be retried or failed over. A client that leaves cancels the task."""
        try:
            rest = self.adirect.iter_chunks(await self._aopen(worker, params, cancel))
            try:
                first = await anext(rest, None)
            except BaseException:
                await rest.aclose()  # type: ignore[attr-defined]  # the response is closed
                raise
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:
            raise attempt_error(worker, exc, self.config.timeout_s) from exc
        return AsyncForwardStream(worker, chunk_json(first) if first is not None else None, rest, self.prices)

    def stream(
        self, worker: Worker, params: Mapping[str, Any], cancel: threading.Event | None = None
    ) -> ForwardStream:
        """Opens the stream and waits for its first chunk (within the first-byte limit)."""
        request = self._request(worker, params) | _STREAM

        def body(signals: Signals) -> tuple[dict[str, Any] | None, Iterator[Any]]:
            signals.sent(True)
            if is_openai_compatible(worker):
                chunks: Iterator[Any] = self.direct.stream(worker, request)
                signals.first()  # the status line came
            else:
                chunks = iter(load_litellm().completion(**self._litellm(request)))
            first = next(chunks, None)
            signals.first()
            return (chunk_json(first) if first is not None else None), chunks

        first, rest = self._attempt(worker, body, cancel)
        return ForwardStream(worker, first, rest, self.prices, cancel)

    def _request(self, worker: Worker, params: Mapping[str, Any]) -> dict[str, Any]:
        request = {k: v for k, v in params.items() if k not in RESERVED}
        return request | {"model": worker.model} | endpoint(worker)

    def _litellm(self, request: dict[str, Any]) -> dict[str, Any]:
        """litellm's own switches: our timeout, no retries of its own, and no parameter dropped in silence."""
        return request | {
            "timeout": self.config.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": False,
        }

    def _attempt(self, worker: Worker, body: Callable[[Signals], T], cancel: threading.Event | None) -> T:
        try:
            return watched(worker, body, first_byte_timeout_s=self.config.first_byte_timeout_s, cancel=cancel)
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:
            raise attempt_error(worker, exc, self.config.timeout_s) from exc


_STREAM = {"stream": True, "stream_options": {"include_usage": True}}


def _gathered(chunks: Iterator[dict[str, Any]], signals: Signals) -> dict[str, Any]:
    """A direct stream read to its end (the status line counts as the first byte) as one chat.completion."""
    signals.first()
    seen: list[dict[str, Any]] = []
    try:
        for raw in chunks:
            if signals.abort.is_set():
                break
            seen.append(chunk_json(raw))
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()
    if not seen:
        raise MalformedReply("the stream ended before its first chunk")
    return whole_from_chunks(seen)


def whole_from_chunks(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The chat.completion a stream's chunks add up to: each choice's text, refusal and tool calls joined,
    its last finish reason, the usage chunk's usage."""
    head: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    usage: Any = None
    fingerprint = None
    for chunk in chunks:
        head = head or {"id": chunk.get("id"), "created": chunk.get("created"), "model": chunk.get("model")}
        fingerprint = chunk.get("system_fingerprint") or fingerprint
        usage = chunk.get("usage") or usage
        for c in chunk.get("choices") or ():
            index = int(c.get("index") or 0)
            slot = choices.setdefault(index, _empty_choice(index))
            _add_delta(slot["message"], c.get("delta") or {})
            slot["finish_reason"] = c.get("finish_reason") or slot["finish_reason"]
    body: dict[str, Any] = {"id": head.get("id"), "object": "chat.completion", "created": head.get("created")}
    body |= {"model": head.get("model"), "choices": [choices[i] for i in sorted(choices)]}
    if fingerprint:
        body["system_fingerprint"] = fingerprint
    if usage:
        body["usage"] = usage
    return body


def _empty_choice(index: int) -> dict[str, Any]:
    message = {"role": "assistant", "content": None}
    return {"index": index, "message": message, "logprobs": None, "finish_reason": None}


def _add_delta(message: dict[str, Any], delta: Mapping[str, Any]) -> None:
    for key in ("content", "refusal"):
        if delta.get(key):
            message[key] = (message.get(key) or "") + delta[key]
    for tc in delta.get("tool_calls") or ():
        calls = message.setdefault("tool_calls", [])
        at = int(tc.get("index", len(calls)) or 0)
        while len(calls) <= at:
            calls.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call, fn = calls[at], tc.get("function") or {}
        call["id"] = tc.get("id") or call["id"]
        call["type"] = tc.get("type") or call["type"]
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""


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
