"""What every request of one `fugu serve` shares: the repository, the store, the pool and one router (resolved
once, on the first request that needs them), the pass-through and the agent sessions, the worker-thread
limit, the stored responses, and the cancel events of the work in flight (set when the server stops).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from fugu_cli.app import Resolved, client_config, open_store, repo_root, resolve
from fugu_cli.config import load_config
from fugu_cli.llm.forward import Forwarder
from fugu_cli.serve.options import ServeOptions
from fugu_cli.serve.passthrough import PassThrough
from fugu_cli.serve.resp_store import ResponseBook
from fugu_cli.serve.routers import SharedRouter
from fugu_cli.serve.turns import AgentSessions
from fugu_cli.serve.wire import MODELS


class Hub:
    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.root = repo_root(options.run.cwd)
        self.api_key = options.key()
        self.run_options = options.run
        config = load_config(options.run.cwd, options.run.overrides())  # a broken config fails at start
        self.store = open_store()
        self.book = ResponseBook(self.store, options.response_ttl_s)
        self.forwarder = Forwarder(client_config(config))
        self._lock = threading.Lock()
        self._resolved: Resolved | None = None
        self._passthrough: PassThrough | None = None
        self._agents: AgentSessions | None = None
        self._limiter: anyio.CapacityLimiter | None = None
        self._running: set[threading.Event] = set()
        self.stopping = False

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        """Worker threads for blocking work (made inside the event loop, on first use)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.options.turn_threads)
        return self._limiter

    def resolved(self) -> Resolved:
        """Pool and router, resolved on the first request that needs them (probing servers takes time, and
        a server may start before its workers do); then shared by every session. Blocking."""
        with self._lock:
            if self._resolved is None:
                resolved = resolve(self.run_options)
                self._resolved = dataclasses.replace(resolved, routers=SharedRouter(resolved.routers))
            return self._resolved

    def made_passthrough(self) -> PassThrough | None:
        """The pass-through if it is made already (making it loads the router: not in the event loop)."""
        return self._passthrough

    def passthrough(self) -> PassThrough:
        resolved = self.resolved()
        with self._lock:
            if self._passthrough is None:
                self._passthrough = PassThrough(resolved, self.store, self.forwarder, self.root)
            return self._passthrough

    def agents(self) -> AgentSessions:
        resolved = self.resolved()
        with self._lock:
            if self._agents is None:
                live = self.options.max_live_sessions
                self._agents = AgentSessions(resolved, self.store, self.forwarder, self.root, live)
            return self._agents

    def model_ids(self) -> list[str]:
        return [*MODELS, *(f"fugu/{n}" for n in self.resolved().names)]

    def warm(self) -> None:
        """Slow one-time set-up (the pool, the router, and litellm's import where the pool needs it) before
        the first request."""
        self.forwarder.warm(self.resolved().pool)
        self.passthrough()

    def begin(self) -> threading.Event:
        """A cancel event for one request's work: set at once if the server is stopping, or when it stops.
        `end` it when the work is over."""
        cancel = threading.Event()
        with self._lock:
            self._running.add(cancel)
            if self.stopping:
                cancel.set()
        return cancel

    def end(self, cancel: threading.Event) -> None:
        with self._lock:
            self._running.discard(cancel)

    @contextmanager
    def running(self) -> Iterator[threading.Event]:
        cancel = self.begin()
        try:
            yield cancel
        finally:
            self.end(cancel)

    def stop(self) -> None:
        with self._lock:
            self.stopping = True
            for cancel in self._running:
                cancel.set()
            agents = self._agents
        if agents is not None:
            agents.close()  # the live sessions' MCP servers stop with the server
