"""One attempt at a worker, watched: the blocking provider call runs in a helper thread while the caller's
thread honours `cancel` within milliseconds and gives up on a worker that took the request and then stayed
silent past `[llm] first_byte_timeout_s`. Shared by the agent's client (client.py) and serve's pass-through
(forward.py), so both cut a silent worker the same way.

Never retries (that is fugu_cli/calls' business) and never prints.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from fugu_cli.errors import Interrupted, ProviderError
from fugu_cli.llm.faults import describe
from fugu_cli.types import Worker

log = logging.getLogger("fugu")
R = TypeVar("R")
_POLL_S = 0.02


class Signals:
    """What the helper thread tells the watcher: the request went out (and whether a first byte is to be
    waited for), the first byte came, a piece of text arrived. Only text and the end wake the watcher: the
    first-byte clock is read on its polls, so a call costs the watcher one wake-up, not three."""

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.abort = threading.Event()  # set by the watcher: stop reading, the caller has gone
        self.silent_since: float | None = None  # a streamed request went out then; nothing heard since

    def sent(self, streaming: bool) -> None:
        self.silent_since = time.monotonic() if streaming else None

    def first(self) -> None:
        self.silent_since = None

    def text(self, text: str) -> None:
        self.events.put(("text", text))


class CallbackFailed(Exception):
    """The caller's `on_text` raised: a bug on our side, never a provider fault to retry."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


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


def watched(
    worker: Worker,
    body: Callable[[Signals], R],
    *,
    first_byte_timeout_s: float,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> R:
    """Run `body` (the blocking call) in a helper thread and wait for its result. Raises `Interrupted` as soon
    as `cancel` is set, a non-retryable `ProviderError` when the worker stays silent past the first-byte
    limit after `body` said a streamed request went out, and whatever `body` raised otherwise."""
    signals = Signals()

    def job() -> None:
        try:
            signals.events.put(("done", body(signals)))
        except BaseException as exc:
            signals.events.put(("error", exc))

    _HELPERS.run(job)
    while True:
        if cancel is not None and cancel.is_set():
            signals.abort.set()
            raise Interrupted(f"interrupted while waiting for {worker.name}")
        since = signals.silent_since  # set once a streamed request is sent, cleared by its first byte
        if since is not None and time.monotonic() - since > first_byte_timeout_s:
            signals.abort.set()
            raise silent(worker, first_byte_timeout_s)
        try:
            kind, value = signals.events.get(timeout=_POLL_S)
        except queue.Empty:
            continue
        if kind == "text" and on_text is not None:
            try:
                on_text(value)
            except Exception as exc:
                signals.abort.set()
                raise CallbackFailed(exc) from exc
        elif kind == "done":
            result: R = value
            return result
        elif kind == "error":
            raise value


def silent(worker: Worker, limit: float) -> ProviderError:
    cause = (
        f"connected but sent nothing for {limit:g} s ([llm] first_byte_timeout_s); not retried, "
        "another worker takes the step"
    )
    return ProviderError(describe(worker, cause), worker=worker.name, retryable=False)
