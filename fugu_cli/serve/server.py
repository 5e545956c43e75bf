"""The `fugu serve` server: its options, the HTTP listener, the table of live sessions and the one lock
that serialises turns on the repository. Sessions come from app.py; HTTP handling lives in http.py.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fugu_cli.app import Resolved, assemble, open_store, repo_root, resolve
from fugu_cli.config import load_config
from fugu_cli.options import RunOptions, permission_mode
from fugu_cli.serve.handler import handler_for
from fugu_cli.serve.wire import MODELS, ApiError, ChatRequest
from fugu_cli.session import Session
from fugu_cli.types import Message, TurnResult

MAX_LIVE_SESSIONS = 64


@dataclass
class ServeOptions:
    """`fugu serve` flags. `api_key` None: FUGU_SERVE_KEY when set, else no authentication."""

    host: str = "127.0.0.1"
    port: int = 8787
    cwd: Path = field(default_factory=Path.cwd)
    pool: str | None = None
    permission_mode: str = "read-only"  # no terminal to ask, so the safe default refuses every write
    api_key: str | None = None
    router: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None


class FuguServer:
    """The HTTP server, the live sessions (by client key and by fugu id) and the repository lock."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.root = repo_root(options.cwd)
        self.api_key = options.api_key if options.api_key is not None else os.environ.get("FUGU_SERVE_KEY")
        load_config(options.cwd, self._run_options().overrides())  # a broken config fails at start
        self._resolved: Resolved | None = None
        self._resolving = threading.Lock()
        self.store = open_store()
        self.turn_lock = threading.Lock()  # one repository: turns never edit it concurrently
        self._table = threading.Lock()
        self._live: OrderedDict[str, Session] = OrderedDict()
        self._aliases: dict[str, str] = {}  # client key -> fugu session id
        self._running: set[threading.Event] = set()
        self.httpd = ThreadingHTTPServer((options.host, options.port), handler_for(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FuguServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="fugu-serve", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._table:
            for cancel in self._running:
                cancel.set()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
            self.httpd.server_close()

    def _run_options(self) -> RunOptions:
        o = self.options
        return RunOptions(
            cwd=o.cwd,
            pool=o.pool,
            router=o.router,
            permission_mode=permission_mode(o.permission_mode),
            max_turns=o.max_turns,
            max_budget_usd=o.max_budget_usd,
        )

    @property
    def resolved(self) -> Resolved:
        """Pool and router, resolved on the first request that needs them (probing servers takes time, and
        a server may start before its workers do); then shared by every session."""
        with self._resolving:
            if self._resolved is None:
                self._resolved = resolve(self._run_options())
            return self._resolved

    def model_ids(self) -> list[str]:
        return [*MODELS, *(f"fugu/{n}" for n in self.resolved.names)]

    def session_for(self, req: ChatRequest) -> Session:
        """The session a request continues, or a new one.

        The key is the `X-Fugu-Session` header, else the body's `session_id`, else its `user`. A known
        key (or a fugu session id of this repository, even from before a restart) continues that session:
        the server's transcript is the history, and only the request's last user message is read. Without a
        key, or with a new one, a fresh session starts, seeded with the request's earlier messages.
        """
        key = req.session_key
        with self._table:
            sid = self._aliases.get(key, key) if key else None
            session = self._live.get(sid) if sid else None
            if session is not None:
                self._live.move_to_end(session.id)
        if session is None:
            row = self.store.get_session(sid) if sid else None
            resume = row.id if row is not None and row.id == sid and row.cwd == str(self.root) else None
            opts = dataclasses.replace(self.resolved.options, resume=resume)
            session = assemble(self.resolved, opts, store=self.store)
            if resume is None:
                _seed(session, req.context)
            self._remember(key, session)
        if req.worker is not None and req.worker not in session.workers:
            names = ", ".join(f"fugu/{n}" for n in session.workers)
            raise ApiError(
                400, f"unknown model fugu/{req.worker}: usable workers are {names}", code="model_not_found"
            )
        return session

    def _remember(self, key: str | None, session: Session) -> None:
        with self._table:
            self._live[session.id] = session
            if key:
                self._aliases[key] = session.id
            while len(self._live) > MAX_LIVE_SESSIONS:  # evicted sessions are still resumable by id
                self._live.popitem(last=False)

    def run_turn(
        self, session: Session, req: ChatRequest, emit: Any, cancel: threading.Event
    ) -> TurnResult | None:
        """One turn under the repository lock; None when the client left before the turn began."""
        with self._table:
            self._running.add(cancel)
        try:
            with self.turn_lock:
                if cancel.is_set():
                    return None
                session.ultra = req.ultra
                session.set_worker(req.worker)
                return session.run_turn(req.task, emit, cancel, stream=req.stream)
        finally:
            with self._table:
                self._running.discard(cancel)


def _seed(session: Session, context: Sequence[Message]) -> None:
    session.add_context(context)
