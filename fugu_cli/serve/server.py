"""The `fugu serve` process: the ASGI app (routes behind the guard) served by uvicorn on a socket bound up
front (so a busy port fails at start, and port 0 is known at once), in the main thread (`run`, which stops on
SIGINT/SIGTERM) or in a background thread (`start`/`stop`, for tests and benchmarks). A connection whose
request headers do not arrive in time is answered 408 and closed (uvicorn has no such timeout).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from fugu_cli.serve import other_routes, resp_routes
from fugu_cli.serve.guard import Guard
from fugu_cli.serve.hub import Hub
from fugu_cli.serve.options import ServeOptions
from fugu_cli.serve.routes import not_found, routes

log = logging.getLogger("fugu")


class _Uvicorn(uvicorn.Server):
    """uvicorn, cancelling every running turn as soon as it starts to stop (a turn can take minutes), and
    exiting 0 after SIGINT or SIGTERM."""

    def __init__(self, config: uvicorn.Config, hub: Hub) -> None:
        super().__init__(config)
        self.hub = hub

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.hub.stop()
        super().handle_exit(sig, frame)
        self._captured_signals.clear()  # a stop asked for is a clean exit (0), not death by the signal

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.hub.stop()
        await super().shutdown(sockets)
        await self.hub.forwarder.adirect.close()  # the event loop's HTTP session, if one was made


class FuguServer:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.hub = Hub(options)
        self.root = self.hub.root
        self.api_key = self.hub.api_key
        every = routes() + resp_routes.routes() + other_routes.routes()
        app = Starlette(routes=every, exception_handlers={HTTPException: not_found})
        app.state.hub = self.hub
        self.app = Guard(
            app, hosts=options.allowed_hosts(), origins=options.cors_origins, api_key=self.api_key
        )
        self.socket = _bind(options.host, options.port, options.backlog)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            timeout_keep_alive=int(options.idle_timeout_s),
            timeout_graceful_shutdown=5,
            backlog=options.backlog,
            lifespan="off",
            server_header=False,
            http=_timed_protocol(options.header_timeout_s),
        )
        self.server = _Uvicorn(config, self.hub)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    @property
    def url(self) -> str:
        host = self.options.host
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/v1"

    def run(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM."""
        self.server.run(sockets=[self.socket])

    def start(self) -> FuguServer:
        """Serve in a background thread; returns once it accepts connections."""
        self._thread = threading.Thread(target=self._serve, name="fugu-serve", daemon=True)
        self._thread.start()
        while not self.server.started and self._thread.is_alive():
            threading.Event().wait(0.01)
        return self

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.socket]))

    def stop(self) -> None:
        self.hub.stop()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.socket.close()


def _timed_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, closing a connection that has not sent a whole request head within
    `header_timeout_s` of connecting, or of the first byte of its next request (slowloris). The body's own
    timeout is the route's (`read_json`)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class TimedHTTP(base):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _cycle_before: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_head()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
                self._await_head()  # the first byte of the next request on a kept-alive connection
            super().data_received(data)
            if self._head_timer is not None and self.cycle is not self._cycle_before:
                self._head_timer.cancel()  # a new request's head is complete: its handler runs
                self._head_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._cycle_before = self.cycle
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            if self.cycle is self._cycle_before and not self.transport.is_closing():
                self.transport.write(
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                self.transport.close()

    return TimedHTTP


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets, and without it every small reply
    # waits for the client's delayed ACK (about 40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
