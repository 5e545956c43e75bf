"""The production `LLM`: one chat-completion attempt at a worker, with streaming, cancel, the first-byte
limit, usage and cost. Retrying, backing off and failing over are the worker-call service's (fugu_cli/calls).

OpenAI-compatible workers (`openai/...`) are posted to directly over HTTP (direct.py): no translation is
needed, so litellm's import (seconds) and its per-call work are not paid for them; every other provider goes
through litellm. Both paths share the watched attempt (attempt.py), the fault classes (faults.py) and pricing.
The only module that imports litellm, and only inside `load_litellm()` (first call), never at import time.
Never prints: a warning the user should hear (no price known) rides on the Completion, and goes to the log.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.errors import Interrupted, ProviderError
from fugu_cli.llm.attempt import CallbackFailed, Signals, watched
from fugu_cli.llm.direct import DirectClient, is_openai_compatible
from fugu_cli.llm.faults import attempt_error, describe
from fugu_cli.llm.modelinfo import ModelInfo, cached_price_per_million, price_per_million
from fugu_cli.llm.parse import MalformedReply, StreamAssembler, completion_from_response
from fugu_cli.llm.pricing import PriceBook
from fugu_cli.llm.transcript import WireCache, mark_cache_breakpoints, private_copy
from fugu_cli.types import Completion, Message, Worker

log = logging.getLogger("fugu")

# A local OpenAI-compatible server often needs no key, but litellm's OpenAI path refuses to run without one.
LOCAL_DUMMY_KEY = "sk-fugu-local"


@dataclass(frozen=True)
class ClientConfig:
    """How one attempt is made (retries are the worker-call service's `RetryPolicy`)."""

    timeout_s: float = 120.0
    stream: bool = True
    direct: bool = True  # OpenAI-compatible workers over HTTP directly; False: through litellm like the rest
    # A worker that takes the request and stays silent this long fails at once (no retry), so the step
    # fails over to another worker instead of waiting out `timeout_s`.
    first_byte_timeout_s: float = 30.0
    # where litellm's answers about models are kept between runs (modelinfo.py); None: asked every run
    model_info: Path | None = None


@functools.cache
def load_litellm() -> Any:
    """Import and configure litellm once (about 3 s); safe to call from a background thread."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True
    return litellm


@functools.cache
def kept_answers(path: Path) -> ModelInfo:
    """litellm's answers about models kept in the file at `path`: one object a file in a process, so its
    clients, the pool's prices and `fugu pool` read the file once."""
    return ModelInfo(load_litellm, path)


def price_book(config: ClientConfig) -> PriceBook:
    """Prices from litellm's table, with its answers kept where `config.model_info` says."""
    return PriceBook(load_litellm, kept_answers(config.model_info) if config.model_info is not None else None)


_preloading = threading.Lock()


def preload_litellm() -> None:
    """Import litellm in a background thread (once), unless it is loaded or loading already."""
    if load_litellm.cache_info().currsize or not _preloading.acquire(blocking=False):
        return
    threading.Thread(target=load_litellm, name="litellm-import", daemon=True).start()


class LiteLLMClient:
    """Implements `fugu_cli.llm.LLM` over litellm (and direct HTTP for OpenAI-compatible workers)."""

    def __init__(self, config: ClientConfig | None = None) -> None:
        self.config = config or ClientConfig()
        self.prices = price_book(self.config)
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
        try:
            done = watched(
                worker,
                functools.partial(self._call, worker, request, stream),
                first_byte_timeout_s=self.config.first_byte_timeout_s,
                cancel=cancel,
                on_text=on_text,
            )
            return self._finish(worker, done)
        except CallbackFailed as exc:
            raise exc.original from None
        except (Interrupted, ProviderError):
            raise
        except Exception as exc:
            log.debug("worker %s: the attempt failed: %r", worker.name, exc)
            raise attempt_error(worker, exc, self.config.timeout_s) from exc

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

    def _call(
        self, worker: Worker, request: dict[str, Any], stream: bool, signals: Signals
    ) -> Completion | None:
        """The blocking call, in a helper thread: says when the request went out and when its first byte
        came, passes text on, and stops reading once the watcher has gone."""
        chunks: Any = None
        try:
            direct = self.is_direct(worker)
            if direct:
                send: Callable[..., Any] = self._direct_send(worker)
            else:
                litellm = load_litellm()
                if (
                    signals.abort.is_set()
                ):  # cancelled while litellm was importing: don't send (or pay for) it
                    return None
                send = functools.partial(
                    litellm.completion, timeout=self.config.timeout_s, num_retries=0, max_retries=0
                )
            # A stream's first sign of life is its status line (direct: `send` returns with it) or, through
            # litellm (which may send only when first read), its first chunk. A whole reply shows none before
            # it is complete, which may rightly take minutes: a non-streamed call has `timeout_s` only.
            signals.sent(stream)
            if not stream:
                return completion_from_response(send(**request), worker.name)
            chunks = send(**request, stream=True, stream_options={"include_usage": True})
            if direct:
                signals.first()
            assembler = StreamAssembler(worker.name)
            for chunk in chunks:
                if signals.abort.is_set():
                    return None
                if not assembler.chunks:
                    signals.first()
                text = assembler.add(chunk)
                if text:
                    signals.text(text)
            return assembler.result()
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
        raise ProviderError(describe(worker, cause), worker=worker.name, retryable=False)
    return out


def prompt_caching(worker: Worker) -> bool:
    """Whether the worker's provider caches a prompt prefix only where the request marks it (Anthropic's
    `cache_control`; OpenAI, DeepSeek and Gemini cache on their own)."""
    model = worker.model.lower()
    return model.startswith("anthropic/") or ("claude" in model and not worker.api_base)


def table_cached_price(model: str, info: ModelInfo | None = None) -> float | None:
    """litellm's price for `model`'s cached input tokens in USD per million, if it knows one (from `info`,
    litellm's kept answers, when given: litellm is then imported only for a model met for the first time)."""
    if info is not None:
        kept = info.get(model).get("cached_price")
        return float(kept) if kept is not None else None
    try:
        return cached_price_per_million(load_litellm().get_model_info(model))
    except Exception:
        return None


def table_price(model: str, info: ModelInfo | None = None) -> tuple[float, float] | None:
    """litellm's price for `model` in USD per million input and output tokens, if it knows one (from `info`
    when given, as `table_cached_price`)."""
    found = info.get(model).get("price") if info is not None else price_per_million(load_litellm(), model)
    return (float(found[0]), float(found[1])) if found else None
