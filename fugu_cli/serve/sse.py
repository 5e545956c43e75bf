"""Between the event loop and the worker threads: blocking work run in a thread while the client's
disconnect is watched (and turned into a cancel), and server-sent events streamed from a thread's output.

The only module of `fugu serve` that touches asyncio and ASGI messages directly.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import anyio
from starlette.types import Receive, Scope, Send

T = TypeVar("T")
_END = object()


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


async def _watch(receive: Receive, cancel: threading.Event) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            cancel.set()
            return


async def run_blocking(
    receive: Receive, fn: Callable[[], T], cancel: threading.Event, limiter: anyio.CapacityLimiter
) -> T:
    """`fn()` in a worker thread; a client that disconnects meanwhile sets `cancel` (fn is expected to
    notice and return soon)."""
    watcher = asyncio.ensure_future(_watch(receive, cancel))
    try:
        return await anyio.to_thread.run_sync(fn, limiter=limiter)
    finally:
        watcher.cancel()


async def run_here(receive: Receive, work: Awaitable[T], cancel: threading.Event) -> T:
    """`work` in the event loop itself; a client that disconnects meanwhile sets `cancel` and cancels it
    (an attempt it was waiting for ends as `Interrupted`)."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        await _watch(receive, cancel)
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    finally:
        watcher.cancel()


def from_thread(
    produce: Callable[[Callable[[Any], None]], None], cancel: threading.Event, limiter: anyio.CapacityLimiter
) -> AsyncIterator[Any]:
    """Runs `produce(put)` in a worker thread and yields what it puts, in order, until it returns.
    An exception it raises is re-raised here after the items it put before. Left early, it sets `cancel`
    and waits for the thread to notice."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(item: Any) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, item)

    def work() -> None:
        try:
            produce(put)
            put(_END)
        except BaseException as e:
            put(_Failed(e))

    async def items() -> AsyncIterator[Any]:
        task = asyncio.ensure_future(anyio.to_thread.run_sync(work, limiter=limiter))
        ended = False
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    ended = True
                    return
                if isinstance(item, _Failed):
                    ended = True
                    raise item.error
                yield item
        finally:
            if not ended:
                cancel.set()
            await asyncio.shield(task)

    return items()


def drain(chunks: Iterator[T], put: Callable[[Any], None], cancel: threading.Event) -> None:
    """Puts each of `chunks` until they end or `cancel` is set (then closes the iterator)."""
    try:
        for chunk in chunks:
            if cancel.is_set():
                return
            put(chunk)
    finally:
        close = getattr(chunks, "close", None)
        if callable(close):
            close()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class EventStream:
    """An ASGI response of server-sent events. When the client goes away, `cancel` is set and the body
    stops being read; the work behind it sees the cancel and ends. `after` is called once the response is
    sent (or cut short), after the body is closed."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        cancel: threading.Event,
        headers: Mapping[str, str] | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        self.body = body
        self.cancel = cancel
        self.after = after
        self.headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        watcher = asyncio.ensure_future(_watch(receive, self.cancel))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            async for piece in self.body:
                if self.cancel.is_set():
                    break
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            if not self.cancel.is_set():
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            self.cancel.set()
        finally:
            watcher.cancel()
            try:
                close = getattr(self.body, "aclose", None)
                if close is not None:
                    await close()
            finally:
                if self.after is not None:
                    self.after()
