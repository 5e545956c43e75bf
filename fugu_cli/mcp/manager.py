"""The MCP servers of one session: started lazily, kept on one event-loop thread, stopped with the session.

A server starts when it is first needed: a call to one of its tools, a prompt, a resource, or the first list
of tools when no earlier session left a copy of its catalog in FUGU_HOME. A server that fails to start or
dies is reported once (`take_notices`, redacted) and the session goes on without it; it is not restarted. Its
stderr goes through the redactor into a capped log file (stderr.py); its tracebacks, to fugu's log.
Blocking methods here are called from the session's threads; the SDK's coroutines run on the loop thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from fugu_cli.errors import FuguError
from fugu_cli.extension_config import ServerSpec
from fugu_cli.mcp.catalog import Catalog, cache_path, load_cached, save_cached
from fugu_cli.mcp.stderr import StderrLog
from fugu_cli.redact import redact
from fugu_cli.tools.sandbox import SandboxPolicy

log = logging.getLogger("fugu")
State = Literal["idle", "starting", "ready", "failed", "stopped"]
T = TypeVar("T")


class McpUnavailable(FuguError):
    """A server that cannot be used (it failed to start, died, or the session is closing)."""


@dataclass(frozen=True)
class ServerStatus:
    name: str
    spec: ServerSpec
    state: str  # "not started", "running", "failed", "stopped"
    error: str
    catalog: Catalog | None
    cached: bool  # the catalog is the copy an earlier session kept (the server has not run yet)


@dataclass
class _Server:
    spec: ServerSpec
    state: State = "idle"
    error: str = ""
    catalog: Catalog | None = None
    live: bool = False
    client: Any = None
    ready: threading.Event = field(default_factory=threading.Event)
    stop: asyncio.Event | None = None
    task: concurrent.futures.Future[None] | None = None
    stderr: StderrLog | None = None


class McpManager:
    """Owns the servers' connections; tools, prompts and resources are reached through it."""

    def __init__(self, specs: Sequence[ServerSpec], root: Path, sandbox: SandboxPolicy, home: Path) -> None:
        self.root = root
        self.sandbox = sandbox
        self.home = home
        self._servers = {s.name: _Server(s) for s in specs}
        self._lock = threading.Lock()
        self._notices: list[str] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        for srv in self._servers.values():
            srv.catalog = load_cached(self._cache(srv))

    def __bool__(self) -> bool:
        return bool(self._servers)

    @property
    def names(self) -> list[str]:
        return list(self._servers)

    def spec(self, name: str) -> ServerSpec | None:
        srv = self._servers.get(name)
        return srv.spec if srv else None

    # --- what the servers offer --------------------------------------------------------------------------

    def catalogs(self, *, start: bool) -> dict[str, Catalog]:
        """Each usable server's catalog; with `start`, servers with no known catalog are started (together)
        to list theirs."""
        if start:
            unknown = [n for n, s in self._servers.items() if s.state == "idle" and s.catalog is None]
            self._start_all(unknown)
        return {
            n: s.catalog
            for n, s in self._servers.items()
            if s.catalog is not None and s.state not in ("failed", "stopped")
        }

    def status(self) -> list[ServerStatus]:
        words = {"idle": "not started", "starting": "starting", "ready": "running"}
        return [
            ServerStatus(n, s.spec, words.get(s.state, s.state), s.error, s.catalog, not s.live)
            for n, s in self._servers.items()
        ]

    def take_notices(self) -> list[str]:
        with self._lock:
            out, self._notices = self._notices, []
        return out

    # --- using a server (starts it when needed) ----------------------------------------------------------

    def call_tool(
        self, server: str, tool: str, arguments: dict[str, Any], cancel: threading.Event | None = None
    ) -> tuple[str, bool, list[tuple[str, str]]]:
        from fugu_cli.mcp import client

        srv = self._ready(server)
        timeout = srv.spec.tool_timeout_s
        try:
            return self._await(
                srv, client.call_tool(srv.client, tool, arguments, timeout), timeout + 5, cancel
            )
        except McpUnavailable as e:
            if not isinstance(e.__cause__, client.CallTimedOut) and "did not answer within" not in str(e):
                raise
            raise McpUnavailable(
                f"the tool {tool} of the MCP server {server} did not answer within {timeout:g} s and was "
                "abandoned; the server is still there. Its limit is `timeout` (milliseconds) in .mcp.json "
                f"or tool_timeout_s in [mcp_servers.{server}]"
            ) from None

    def get_prompt(self, server: str, name: str, arguments: dict[str, str]) -> str:
        from fugu_cli.mcp import client

        srv = self._ready(server)
        return self._await(srv, client.get_prompt(srv.client, name, arguments), srv.spec.tool_timeout_s)

    def read_resource(self, server: str, uri: str) -> str:
        from fugu_cli.mcp import client

        srv = self._ready(server)
        return self._await(srv, client.read_resource(srv.client, uri), srv.spec.tool_timeout_s)

    def probe(self) -> list[ServerStatus]:
        """Start every server (for `fugu mcp list`), so each shows its live status and catalog."""
        self._start_all([n for n, s in self._servers.items() if s.state == "idle"])
        return self.status()

    def close(self) -> None:
        """Stop every server (stdin closed, then killed after a grace period) and the loop thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        for srv in self._servers.values():
            if srv.stop is not None:
                loop.call_soon_threadsafe(srv.stop.set)
        for srv in self._servers.values():
            if srv.task is not None:
                try:
                    srv.task.result(timeout=10)
                except Exception:
                    log.debug("MCP server %s did not stop cleanly", srv.spec.name, exc_info=True)
            if srv.state in ("ready", "starting"):
                srv.state = "stopped"
            if srv.stderr is not None:
                srv.stderr.close()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)

    # --- the loop and the servers' lives -----------------------------------------------------------------

    def _ready(self, name: str) -> _Server:
        srv = self._servers.get(name)
        if srv is None:
            raise McpUnavailable(f"there is no MCP server named {name!r}")
        if srv.state in ("idle", "starting"):
            self._start_all([name])
        if srv.state != "ready":
            raise McpUnavailable(f"the MCP server {name} is not available: {srv.error or srv.state}")
        return srv

    def _start_all(self, names: Sequence[str]) -> None:
        started: list[_Server] = []
        with self._lock:
            if self._closed:
                return
            loop = self._ensure_loop()
            for name in names:
                srv = self._servers[name]
                if srv.state == "idle":
                    srv.state = "starting"
                    srv.task = asyncio.run_coroutine_threadsafe(self._serve(srv), loop)
                started.append(srv)
        for srv in started:
            if not srv.ready.wait(srv.spec.startup_timeout_s):
                why = f"it did not answer within {srv.spec.startup_timeout_s:g} s"
                self._failed(srv, why + self._said(srv))
                if srv.stop is not None:
                    loop.call_soon_threadsafe(srv.stop.set)
                if srv.task is not None:
                    srv.task.cancel()

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            # the thread that starts a sandboxed server must outlive it: bwrap dies with its starting thread
            thread = threading.Thread(target=loop.run_forever, name="fugu-mcp", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    async def _serve(self, srv: _Server) -> None:
        from fugu_cli.mcp import client

        srv.stop = asyncio.Event()
        srv.stderr = errlog = StderrLog(self._log_path(srv.spec.name))

        def exited(code: int | None) -> None:
            if srv.state in ("ready", "starting") and not self._closed:
                how = f"exit code {code}" if code is not None else "its output closed"
                # its stderr ends with it: its last words are read
                self._failed(srv, f"it stopped ({how}){self._said(srv, wait_s=0.5)}")
            if srv.stop is not None:
                srv.stop.set()

        stderr = errlog.writer() if srv.spec.transport == "stdio" else None
        try:
            async with client.open_client(srv.spec, self.root, self.sandbox, stderr, exited) as session:
                catalog = await client.list_catalog(session)
                srv.client, srv.catalog, srv.live = session, catalog, True
                save_cached(self._cache(srv), catalog)
                if srv.state == "starting":
                    srv.state = "ready"
                srv.ready.set()
                await srv.stop.wait()
        except BaseException as e:
            if srv.state in ("starting", "ready") and not self._closed:
                log.warning("MCP server %s failed", srv.spec.name, exc_info=e)
                self._failed(srv, _describe(e) + self._said(srv, wait_s=0.5))
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            errlog.close()
            srv.client = None
            srv.ready.set()

    def _failed(self, srv: _Server, why: str) -> None:
        with self._lock:
            if srv.state == "failed":
                return
            was = srv.state
            why = redact(why)  # an exception's text or a server's last words may hold a secret
            srv.state, srv.error = "failed", why
            what = "could not start" if was == "starting" else "stopped working"
            self._notices.append(
                f"MCP server {srv.spec.name} {what}: {why}. The session goes on without its tools."
            )
        srv.ready.set()

    def _await(
        self,
        srv: _Server,
        coro: Coroutine[Any, Any, T],
        timeout: float,
        cancel: threading.Event | None = None,
    ) -> T:
        loop = self._loop
        if loop is None or self._closed:
            coro.close()
            raise McpUnavailable("the session's MCP servers are stopped")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    future.cancel()
                    raise McpUnavailable("interrupted by the user") from None
                if time.monotonic() > deadline:
                    future.cancel()
                    raise McpUnavailable(f"{srv.spec.name} did not answer within {timeout:g} s") from None
            except McpUnavailable:
                raise
            except Exception as e:
                log.info("MCP server %s: a request failed", srv.spec.name, exc_info=e)
                if srv.state != "ready":
                    raise McpUnavailable(
                        f"the MCP server {srv.spec.name} is not available: {srv.error}"
                    ) from e
                raise McpUnavailable(f"{srv.spec.name}: {_describe(e)}") from e

    def _cache(self, srv: _Server) -> Path:
        return cache_path(self.home, srv.spec.name, srv.spec.fingerprint())

    def _said(self, srv: _Server, wait_s: float = 0.0) -> str:
        """The server's last lines on stderr since it was started (redacted), for a failure's message, after
        waiting up to `wait_s` for its stderr to end."""
        lines = srv.stderr.last_lines(wait_s) if srv.stderr is not None else []
        return "; its last words on stderr: " + " | ".join(lines) if lines else ""

    def _log_path(self, name: str) -> Path:
        return self.home / "logs" / f"mcp-{name}.log"


def _describe(e: BaseException) -> str:
    """One line for an exception that may be an anyio ExceptionGroup around the real cause."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, FileNotFoundError):
        return f"command not found ({e.filename or e})"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
