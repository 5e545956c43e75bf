"""A small HTTP/1.1 client for an asyncio event loop (`AsyncDirect`, serve's pass-through): POST a body to a
worker and read its response as it arrives, over kept-alive connections, https verified by the caller's SSL
context. Direct connections only: a worker reached through a proxy is served from worker threads (urllib3),
never from here.

Built on asyncio's protocols and httptools' response parser (the parser uvicorn serves with), not aiohttp:
its client cost about 0.4 ms more of the server's CPU a call (docs/BENCHMARKS.md, serve, fifteenth pass).
Faults are the builtin exceptions `faults.classify` knows: `ConnectionError` (refused, reset, closed early,
a malformed response, TLS failures), `TimeoutError` (connect, and each wait for the next bytes).
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections import deque
from typing import Any

_PAUSE_AT = 1 << 20  # bytes of body buffered before the connection stops reading (the reader is slower)
_IDLE_KEPT = 64  # idle connections kept per host (more are closed once their response is read)
_IDLE_S = 15.0  # an idle connection older than this is closed rather than reused (aiohttp's keep-alive)


class Response:
    """One response: `status`, `headers` (lower-case names), its body by `read`, or by `part` as it comes.
    `release` gives the connection back when the body was read to its end (and the server keeps it),
    else closes it."""

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers

    async def read(self) -> bytes:
        parts = []
        while data := await self._conn.body_part():
            parts.append(data)
        return b"".join(parts)

    async def text(self) -> str:
        return (await self.read()).decode("utf-8", "replace")

    async def part(self) -> bytes:
        """The body's next bytes as they arrive; b"" at its end."""
        return await self._conn.body_part()

    def release(self) -> None:
        self._conn.release()


class LoopHTTP:
    """POSTs over kept-alive connections, per (scheme, host, port). Use from one event loop."""

    def __init__(self, connect_timeout_s: float, read_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: dict[tuple[str, str, int], deque[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def post(
        self, url: str, body: bytes, headers: dict[str, str], tls: ssl.SSLContext | None
    ) -> Response:
        """POST `body` to `url`; the response once its head came (within the read timeout)."""
        scheme, host, port, target = _split(url)
        key = (scheme, host, port)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop they were made in
            self._idle.clear()
            self._open.clear()
            self._loop = loop
        head = [f"POST {target} HTTP/1.1", f"host: {_host_header(host, port, scheme)}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if any(_UNSAFE.search(line) for line in head):  # a key or URL that would end the line early
            raise ValueError("a line break, space or control character in the worker's URL or a header")
        head += [f"content-length: {len(body)}", "accept-encoding: gzip, deflate", "", ""]
        conn = self._reuse(key) or await self._connect(key, tls if scheme == "https" else None)
        return await conn.request("\r\n".join(head).encode("latin-1") + body)

    def _reuse(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        loop = asyncio.get_running_loop()
        while idle:
            conn = idle.pop()
            if not conn.closed and loop.time() - conn.idle_since < _IDLE_S:
                return conn
            conn.close()
        return None

    async def _connect(self, key: tuple[str, str, int], tls: ssl.SSLContext | None) -> _Connection:
        _, host, port = key
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(self, key),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise TimeoutError(
                f"connecting to {host}:{port} took over {self.connect_timeout_s:g} s"
            ) from None
        except OSError as e:  # refused, unreachable, a name not found, a certificate not trusted
            raise ConnectionError(f"cannot connect to {host}:{port}: {e}") from e
        return conn

    def _keep(self, conn: _Connection) -> None:
        idle = self._idle.setdefault(conn.key, deque())
        if len(idle) >= _IDLE_KEPT:
            conn.close()
            return
        conn.idle_since = asyncio.get_running_loop().time()
        idle.append(conn)

    async def close(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._idle.clear()


class _Connection(asyncio.Protocol):
    """One connection, one response at a time: httptools' parser feeds the head and the body parts to the
    reader waiting for them."""

    def __init__(self, owner: LoopHTTP, key: tuple[str, str, int]) -> None:
        import httptools

        self.owner = owner
        self.key = key
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.busy = False  # a request was written and its response is not released yet
        self.idle_since = 0.0
        self._new_parser = httptools.HttpResponseParser
        self._parse_error = httptools.HttpParserError
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self._head_done = False
        self._keep_alive = False  # the server's word, read with the head (the parser forgets it at the end)
        self._done = False
        self._error: BaseException | None = None
        self._parts: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._inflate: Any = None

    # the request

    async def request(self, data: bytes) -> Response:
        if self.closed:
            raise ConnectionError("the worker closed the connection")
        self._reset()
        self.busy = True
        self.transport.write(data)
        try:
            while not self._head_done:
                await self._wait()
        except BaseException:  # a fault, a timeout, or the caller cancelled: nobody will read the rest
            self.close()
            raise
        return Response(self)

    async def body_part(self) -> bytes:
        """The body's next bytes (b"" at its end); raises where the connection failed before it."""
        while not self._parts:
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            await self._wait()
        data = self._parts.popleft()
        self._buffered -= len(data)
        if self._paused and self._buffered < _PAUSE_AT // 2:
            self._paused = False
            self.transport.resume_reading()
        return data

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self.owner.read_timeout_s):
                await self._waiter
        except TimeoutError:
            self.close()
            raise TimeoutError(f"no data from the worker for {self.owner.read_timeout_s:g} s") from None
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def release(self) -> None:
        """Back to the pool when the response was read to its end and the server keeps the connection."""
        self.busy = False
        if self._done and not self.closed and self._error is None and self._keep_alive:
            self.parser = self._new_parser(self)
            self.owner._keep(self)
        else:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.owner._open.discard(self)
            if self.transport is not None:
                self.transport.close()

    # asyncio's protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.owner._open.add(self)

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes on an idle connection (a server's own 408, say): not to be reused
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except self._parse_error as e:
            self._fail(ConnectionError(f"a malformed response from the worker: {e}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.owner._open.discard(self)
        if not self._done and exc is None and self._head_done and self._until_close():
            self._done = True  # a body that ends with its connection (no length, not chunked) is whole
            self._wake()
        elif not self._done:
            self._fail(ConnectionError(f"the worker closed the connection{f': {exc}' if exc else ''}"))

    def pause_writing(self) -> None:  # bodies are written whole: the kernel's buffer takes them
        pass

    def resume_writing(self) -> None:
        pass

    def _until_close(self) -> bool:
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        return not chunked and "content-length" not in self.headers

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    # httptools' callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._keep_alive = self.parser.should_keep_alive()
        encoding = self.headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip", "deflate"):
            self._inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, told by the header
        elif encoding not in ("", "identity"):
            self._fail(ConnectionError(f"the worker's reply is {encoding}-encoded, which fugu cannot read"))
        self._head_done = True
        self._wake()

    def on_body(self, data: bytes) -> None:
        if self._inflate is not None:
            try:
                data = self._inflate.decompress(data)
            except zlib.error as e:
                self._fail(ConnectionError(f"the worker's compressed reply is damaged: {e}"))
                return
        if data:
            self._parts.append(data)
            self._buffered += len(data)
            if not self._paused and self._buffered >= _PAUSE_AT:
                self._paused = True
                self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._inflate is not None:
            rest = self._inflate.flush()
            if rest:
                self._parts.append(rest)
        self._done = True
        self._wake()


# in the request line's target (spaces too) or a header's value (a header line has its ": ")
_UNSAFE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]|^POST \S*\s\S*\s")


def _split(url: str) -> tuple[str, str, int, str]:
    """scheme, host, port and request target of an http:// or https:// URL."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise ConnectionError(f"not an http:// or https:// URL: {url}")
    authority, slash, path = rest.partition("/")
    target = slash + path if slash else "/"
    authority = authority.rpartition("@")[2]
    default = 443 if scheme == "https" else 80
    if authority.startswith("["):  # [IPv6]:port
        host, _, tail = authority[1:].partition("]")
        port = int(tail[1:]) if tail[1:].isdigit() else -1 if tail else default
    else:
        host, _, port_text = authority.partition(":")
        port = int(port_text) if port_text.isdigit() else -1 if port_text else default
    if not host or not 0 < port < 65536:
        raise ConnectionError(f"no host or a bad port in the URL: {url}")
    return scheme, host, port, target


def _host_header(host: str, port: int, scheme: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == (443 if scheme == "https" else 80) else f"{shown}:{port}"
