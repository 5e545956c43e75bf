"""The production `LLM`: chat completions with our own retries, streaming, cancel, usage and cost.

OpenAI-compatible workers (`openai/...`) are posted to directly over HTTP (direct.py): no translation is
needed, so litellm's import (seconds) and its per-call work are not paid for them; every other provider goes
through litellm. Both paths share the retries, the fault classes, cancel and pricing.
The only module that imports litellm, and only inside `load_litellm()` (first call), never at import time.
Never prints: a warning the user should hear (no price known) rides on the Completion, and goes to the log.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fugu_cli.errors import ContextOverflow, Interrupted, ProviderError
from fugu_cli.llm.direct import DirectClient, is_openai_compatible
from fugu_cli.llm.parse import MalformedReply, StreamAssembler, completion_from_response
from fugu_cli.llm.pricing import PriceBook
from fugu_cli.llm.transcript import WireCache, mark_cache_breakpoints, private_copy
from fugu_cli.types import Completion, Message, Worker

log = logging.getLogger("fugu")

# A local OpenAI-compatible server often needs no key, but litellm's OpenAI path refuses to run without one.
LOCAL_DUMMY_KEY = "sk-fugu-local"
_POLL_S = 0.02


@dataclass(frozen=True)
class ClientConfig:
    """`max_retries` counts retries after the first attempt (so 2 means at most 3 attempts)."""

    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    stream: bool = True
    direct: bool = True  # OpenAI-compatible workers over HTTP directly; False: through litellm like the rest
    # A worker that takes the request and stays silent this long fails at once (no retry), so the step
    # fails over to another worker instead of waiting out `timeout_s` on every attempt.
    first_byte_timeout_s: float = 30.0


@functools.cache
def load_litellm() -> Any:
    """Import and configure litellm once (about 3 s); safe to call from a background thread."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True
    return litellm


_preloading = threading.Lock()


class _Helpers:
    """Daemon threads that make the blocking provider calls, reused from call to call (a new thread per
    call cost about a millisecond a step). A cancelled call still blocked in its provider keeps its thread;
    the next call gets another. Daemons: a call nobody waits for never holds up the exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        if spawn:
            threading.Thread(target=self._loop, name="llm-call", daemon=True).start()
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a job reports its own errors; this only keeps the thread alive
                log.debug("an LLM call's helper failed", exc_info=True)
            with self._lock:
                self._idle += 1


_HELPERS = _Helpers()


def preload_litellm() -> None:
    """Import litellm in a background thread (once), unless it is loaded or loading already."""
    if load_litellm.cache_info().currsize or not _preloading.acquire(blocking=False):
        return
    threading.Thread(target=load_litellm, name="litellm-import", daemon=True).start()


@dataclass(frozen=True)
class _Fault:
    cause: str
    retryable: bool
    retry_after_s: float | None = None
    context: bool = False  # the request does not fit the worker's window


# How providers (and the servers behind OpenAI-compatible endpoints) say a prompt is too long, for the ones
# litellm does not map to ContextWindowExceededError itself.
_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the context",
    "context length",
)


class _CallbackFailed(Exception):
    """The caller's `on_text` raised: a bug on our side, never a provider fault to retry."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


class LiteLLMClient:
    """Implements `fugu_cli.llm.LLM` over litellm."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.prices = PriceBook(load_litellm)
        self.direct = DirectClient(self.config.timeout_s)
        self.wire = WireCache()

    def warm(self, workers: Sequence[Worker] = ()) -> None:
        """Open the HTTP client, and import litellm (about 3 s and 150 MiB) when a call to one of `workers`
        needs it (all of them: when none are given); e.g. in a background thread while the user types."""
        self.direct.warm()
        if not workers or any(self.needs_litellm(w) for w in workers):
            load_litellm()

    def is_direct(self, worker: Worker) -> bool:
        """Whether calls to `worker` skip litellm."""
        return self.config.direct and is_openai_compatible(worker)

    def needs_litellm(self, worker: Worker) -> bool:
        """Whether a call to `worker` needs litellm: to translate it, or to price its reply from the table."""
        return not self.is_direct(worker) or self.prices.needs_table(worker)

    def complete(
        self,
        worker: Worker,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        request = self._request(worker, messages, tools)
        # A direct call streams even when nobody shows the text: before a reply is complete, its stream's
        # status line is the only sign that the worker is alive (first_byte_timeout_s). Through litellm, whose
        # stream handling differs by provider, only a reply shown as it arrives streams.
        stream = self.config.stream and (on_text is not None or self.is_direct(worker))
        if self.is_direct(worker) and self.prices.needs_table(worker):
            preload_litellm()  # its reply's cost needs litellm's price table: import it while the call waits

        def attempt() -> Completion:
            return self._attempt(worker, request, stream, on_text, cancel)

        try:
            return with_retries(worker, self.config, attempt, cancel)
        except _CallbackFailed as exc:
            raise exc.original from None

    def _request(
        self, worker: Worker, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        wire = self.wire.build(messages)
        if not self.is_direct(worker):  # litellm may change the dicts it is given: not the cached ones
            wire = private_copy(wire)
        request: dict[str, Any] = {
            "model": worker.model,
            "messages": mark_cache_breakpoints(wire) if prompt_caching(worker) else wire,
        }
        if tools:
            request["tools"] = [dict(t) for t in tools]
        return request | endpoint(worker)

    def _attempt(
        self,
        worker: Worker,
        request: dict[str, Any],
        stream: bool,
        on_text: Callable[[str], None] | None,
        cancel: threading.Event | None,
    ) -> Completion:
        """Runs the blocking provider call in a helper thread so `cancel` is honoured within milliseconds, and
        a worker silent past `first_byte_timeout_s` after the request went out is given up on."""
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        abort = threading.Event()
        body = functools.partial(self._call, worker, request, stream, events, abort)
        _HELPERS.run(body)
        silent_since: float | None = None  # set once the request is sent, cleared by its first byte
        while True:
            if cancel is not None and cancel.is_set():
                abort.set()
                raise Interrupted(f"interrupted while waiting for {worker.name}")
            limit = self.config.first_byte_timeout_s
            if silent_since is not None and time.monotonic() - silent_since > limit:
                abort.set()
                raise self._silent(worker)
            try:
                kind, value = events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if kind == "sent":
                silent_since = time.monotonic() if value else None
            elif kind == "first":
                silent_since = None
            elif kind == "text" and on_text is not None:
                try:
                    on_text(value)
                except Exception as exc:
                    abort.set()
                    raise _CallbackFailed(exc) from exc
            elif kind == "done":
                return self._finish(worker, value)
            elif kind == "error":
                raise value

    def _silent(self, worker: Worker) -> ProviderError:
        limit = self.config.first_byte_timeout_s
        cause = (
            f"connected but sent nothing for {limit:g} s ([llm] first_byte_timeout_s); not retried, "
            "another worker takes the step"
        )
        return ProviderError(_describe(worker, cause), worker=worker.name, retryable=False)

    def _call(
        self,
        worker: Worker,
        request: dict[str, Any],
        stream: bool,
        events: queue.Queue[tuple[str, Any]],
        abort: threading.Event,
    ) -> None:
        chunks: Any = None
        first = functools.partial(events.put, ("first", None))
        try:
            direct = self.is_direct(worker)
            if direct:
                send: Callable[..., Any] = self._direct_send(worker)
            else:
                litellm = load_litellm()
                if abort.is_set():  # cancelled while litellm was importing: don't send (or pay for) it
                    return
                send = functools.partial(
                    litellm.completion, timeout=self.config.timeout_s, num_retries=0, max_retries=0
                )
            # A stream's first sign of life is its status line (direct: `send` returns with it) or, through
            # litellm (which may send only when first read), its first chunk. A whole reply shows none before
            # it is complete, which may rightly take minutes: a non-streamed call has `timeout_s` only.
            events.put(("sent", stream))
            if not stream:
                events.put(("done", completion_from_response(send(**request), worker.name)))
                return
            chunks = send(**request, stream=True, stream_options={"include_usage": True})
            if direct:
                first()
            assembler = StreamAssembler(worker.name)
            for chunk in chunks:
                if abort.is_set():
                    return
                if not assembler.chunks:
                    first()
                text = assembler.add(chunk)
                if text:
                    events.put(("text", text))
            events.put(("done", assembler.result()))
        except Exception as exc:
            events.put(("error", exc))
        finally:
            close = getattr(chunks, "close", None)
            if callable(close):  # a cancelled stream stops reading (and its connection closes) now
                try:
                    close()
                except Exception:
                    log.debug("closing a stream failed", exc_info=True)

    def _direct_send(self, worker: Worker) -> Callable[..., Any]:
        """`send(**request, stream=...)` over direct.py, shaped like `litellm.completion`."""

        def send(stream: bool = False, **request: Any) -> Any:
            if stream:
                return self.direct.stream(worker, request | {"stream": True})
            return self.direct.complete(worker, request)

        return send

    def _finish(self, worker: Worker, completion: Completion | None) -> Completion:
        if completion is None:
            raise MalformedReply("reply had no choices")
        usage, warning = self.prices.cost(worker, completion.usage)
        if warning:
            log.warning("%s", warning)
        return Completion(
            completion.message,
            usage,
            completion.model or worker.model,
            completion.finish_reason,
            warnings=(warning,) if warning else (),
        )


T = TypeVar("T")


def with_retries(
    worker: Worker, config: ClientConfig, attempt: Callable[[], T], cancel: threading.Event | None = None
) -> T:
    """Calls `attempt` until it succeeds, retrying transient provider faults with backoff (honouring
    Retry-After); raises `ProviderError` when a fault is not retryable or the attempts are spent, and
    `Interrupted` as soon as `cancel` is set between attempts."""
    attempts = config.max_retries + 1
    fault = _Fault("no attempt made", retryable=True)
    for n in range(attempts):
        _check(cancel)
        try:
            return attempt()
        except (Interrupted, ProviderError, _CallbackFailed):
            raise
        except Exception as exc:
            fault = classify(exc, config.timeout_s)
            log.debug("worker %s attempt %d failed: %r", worker.name, n + 1, exc)
            if fault.context:  # retrying the same request cannot help: the caller compacts
                raise ContextOverflow(_describe(worker, fault.cause), worker=worker.name) from exc
            if not fault.retryable:
                raise ProviderError(
                    _describe(worker, fault.cause), worker=worker.name, retryable=False
                ) from exc
        if n + 1 < attempts:
            _sleep(_delay(config, n, fault), cancel)
    cause = f"{fault.cause} (after {attempts} attempts)"
    raise ProviderError(_describe(worker, cause), worker=worker.name)


def endpoint(worker: Worker) -> dict[str, Any]:
    """litellm's `api_base` and `api_key` arguments for `worker` (a local server gets a dummy key)."""
    out: dict[str, Any] = {}
    if worker.api_base:
        out["api_base"] = worker.api_base
    key = os.environ.get(worker.api_key_env) if worker.api_key_env else None
    if key:
        out["api_key"] = key
    elif worker.api_base:
        out["api_key"] = LOCAL_DUMMY_KEY
    elif worker.api_key_env:
        cause = f"{worker.api_key_env} is not set. Set it, or remove the worker from the pool"
        raise ProviderError(_describe(worker, cause), worker=worker.name, retryable=False)
    return out


def _delay(config: ClientConfig, attempt: int, fault: _Fault) -> float:
    cap = config.backoff_max_s
    if fault.retry_after_s is not None:
        return min(max(fault.retry_after_s, 0.0), cap)
    backoff = config.backoff_base_s * float(2**attempt) * (0.5 + random.random())
    return min(backoff, cap)


def classify(exc: BaseException, timeout_s: float) -> _Fault:
    """Maps litellm's (and the OpenAI SDK's) exceptions onto retry categories."""
    if isinstance(exc, MalformedReply):
        return _Fault(f"malformed reply: {exc}", retryable=True)
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if name == "ContextWindowExceededError" or (
        (status in (400, 413, 422) or name.startswith("BadRequest"))
        and any(p in str(exc).lower() for p in _CONTEXT_PHRASES)
    ):
        return _Fault(f"the request does not fit the context window: {_first_line(exc)}", False, context=True)
    if name in ("Timeout", "APITimeoutError") or isinstance(exc, TimeoutError):
        return _Fault(f"timed out after {timeout_s:g} s", retryable=True)
    if name in ("AuthenticationError", "PermissionDeniedError", "NotFoundError") or name.startswith(
        "BadRequest"
    ):
        return _Fault(f"{_status_text(status)}{_first_line(exc)}", retryable=False)
    if name == "UnsupportedParamsError":
        return _Fault(_first_line(exc), retryable=False)
    if name == "APIConnectionError" or isinstance(exc, ConnectionError):
        return _Fault(f"connection failed: {_first_line(exc)}", retryable=True)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
        return _Fault(f"{_status_text(status)}{_first_line(exc)}", retryable=False)
    if status == 429 or name == "RateLimitError":
        return _Fault("rate limited (429)", retryable=True, retry_after_s=_retry_after(exc))
    if isinstance(status, int) and status >= 500:
        return _Fault(
            f"server error {status}: {_first_line(exc)}", retryable=True, retry_after_s=_retry_after(exc)
        )
    return _Fault(f"malformed reply: {_first_line(exc)}", retryable=True)


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        headers = getattr(exc, "litellm_response_headers", None)
    value = headers.get("retry-after") if headers else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return parsedate_to_datetime(str(value)).timestamp() - time.time()
        except (TypeError, ValueError):
            return None


def _status_text(status: object) -> str:
    return f"HTTP {status}: " if isinstance(status, int) else ""


# litellm wraps a provider's words in its own names ("litellm.ServiceUnavailableError:
# ServiceUnavailableError: OpenAIException - upstream is down"); the user needs the provider's reason first.
_WRAPPERS = re.compile(r"^(?:(?:litellm\.)?\w+(?:Error|Exception)(?::| -)\s*)+")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (_WRAPPERS.sub("", text).strip() or text)[:300]


def _describe(worker: Worker, cause: str) -> str:
    return f"worker {worker.name} ({worker.model}): {cause}"


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Interrupted("interrupted")


def _sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Interrupted("interrupted during retry backoff")


def prompt_caching(worker: Worker) -> bool:
    """Whether the worker's provider caches a prompt prefix only where the request marks it (Anthropic's
    `cache_control`; OpenAI, DeepSeek and Gemini cache on their own)."""
    model = worker.model.lower()
    return model.startswith("anthropic/") or ("claude" in model and not worker.api_base)


def table_cached_price(model: str) -> float | None:
    """litellm's price for `model`'s cached input tokens in USD per million, if it knows one."""
    try:
        info = load_litellm().get_model_info(model)
        cost = info.get("cache_read_input_token_cost")
    except Exception:
        return None
    return float(cost) * 1_000_000 if cost is not None else None


def table_price(model: str) -> tuple[float, float] | None:
    """litellm's price for `model` in USD per million input and output tokens, if it knows one."""
    try:
        cost_in, cost_out = load_litellm().cost_per_token(
            model=model, prompt_tokens=1_000_000, completion_tokens=1_000_000
        )
    except Exception:
        return None
    return float(cost_in), float(cost_out)
