"""SQLite store under FUGU_HOME: sessions, transcripts, steps, route decisions, tool calls, memory, outcomes.

Append-only tables with short numbered migrations; WAL so readers never block the session that writes.
Keys never reach it: callers pass redacted text. Never prints.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.redact import redact as redact  # the one redactor; ledger and session import it from here
from fugu_cli.types import Message, dumps

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY, created_at REAL NOT NULL, updated_at REAL NOT NULL,
        cwd TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', mode TEXT NOT NULL DEFAULT 'fugu',
        status TEXT NOT NULL DEFAULT 'open', pool_json TEXT NOT NULL DEFAULT '[]',
        router TEXT NOT NULL DEFAULT '', cost_usd REAL NOT NULL DEFAULT 0
    );
    CREATE TABLE messages (
        session_id TEXT NOT NULL, seq INTEGER NOT NULL, turn INTEGER NOT NULL, scope TEXT NOT NULL,
        data_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (session_id, scope, seq)
    );
    CREATE TABLE steps (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        worker TEXT NOT NULL, source TEXT NOT NULL, role TEXT, status TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cached_tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL, text TEXT NOT NULL DEFAULT '', started_at REAL NOT NULL,
        finished_at REAL NOT NULL
    );
    CREATE TABLE route_decisions (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        worker TEXT NOT NULL, source TEXT NOT NULL, role TEXT, scores_json TEXT NOT NULL,
        latency_ms REAL NOT NULL, reason TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL
    );
    CREATE TABLE tool_calls (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        agent TEXT NOT NULL, call_id TEXT NOT NULL, tool TEXT NOT NULL, arguments TEXT NOT NULL,
        result TEXT NOT NULL, is_error INTEGER NOT NULL, denied INTEGER NOT NULL, exit_code INTEGER,
        duration_ms REAL NOT NULL, files_json TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE turns (
        session_id TEXT NOT NULL, turn INTEGER NOT NULL, task TEXT NOT NULL, status TEXT NOT NULL,
        result TEXT NOT NULL, cost_usd REAL NOT NULL, checkpoint TEXT, created_at REAL NOT NULL,
        PRIMARY KEY (session_id, turn)
    );
    CREATE TABLE memory_facts (
        session_id TEXT NOT NULL, workflow INTEGER NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
        value TEXT NOT NULL, agent TEXT NOT NULL, created_at REAL NOT NULL
    );
    CREATE TABLE outcomes (
        task TEXT NOT NULL, worker TEXT NOT NULL, reward REAL NOT NULL, cost_usd REAL NOT NULL,
        source TEXT NOT NULL DEFAULT '', session_id TEXT, created_at REAL NOT NULL
    );
    CREATE INDEX tool_calls_session ON tool_calls (session_id, turn, step);
    CREATE INDEX steps_session ON steps (session_id, turn, step);
    """,
)


@dataclass(frozen=True)
class SessionRow:
    id: str
    created_at: float
    updated_at: float
    cwd: str
    title: str
    mode: str
    status: str
    pool_json: str
    router: str
    cost_usd: float


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class Store:
    """One SQLite file. Thread-safe: one connection, one lock (the session writes from worker threads)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                self._db.executescript(f"BEGIN; {script}; PRAGMA user_version = {i}; COMMIT;")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        with self._lock:
            self._db.execute(sql, args)

    # sessions

    def create_session(self, sid: str, cwd: str, mode: str, pool_json: str, router: str) -> None:
        now = time.time()
        self.execute(
            "INSERT INTO sessions (id, created_at, updated_at, cwd, mode, pool_json, router) "
            "VALUES (?,?,?,?,?,?,?)",
            (sid, now, now, cwd, mode, pool_json, router),
        )

    def touch_session(self, sid: str, *, title: str | None = None, cost_delta: float = 0.0) -> None:
        self.execute(
            "UPDATE sessions SET updated_at=?, cost_usd=cost_usd+?, "
            "title=CASE WHEN title='' AND ? IS NOT NULL THEN ? ELSE title END WHERE id=?",
            (time.time(), cost_delta, title and redact(title), title and redact(title), sid),
        )

    def get_session(self, sid: str) -> SessionRow | None:
        rows = self.query("SELECT * FROM sessions WHERE id=?", (sid,))
        if not rows:
            rows = self.query("SELECT * FROM sessions WHERE id LIKE ? ORDER BY created_at DESC", (sid + "%",))
        return SessionRow(**dict(rows[0])) if len(rows) == 1 else None

    def latest_session(self, cwd: str | None = None) -> SessionRow | None:
        if cwd is None:
            rows = self.query("SELECT * FROM sessions ORDER BY updated_at DESC LIMIT 1")
        else:
            rows = self.query("SELECT * FROM sessions WHERE cwd=? ORDER BY updated_at DESC LIMIT 1", (cwd,))
        return SessionRow(**dict(rows[0])) if rows else None

    def list_sessions(self, limit: int = 20) -> list[SessionRow]:
        rows = self.query("SELECT * FROM sessions ORDER BY updated_at DESC LIMIT ?", (limit,))
        return [SessionRow(**dict(r)) for r in rows]

    # transcript

    def append_message(self, sid: str, scope: str, turn: int, seq: int, message: Message) -> None:
        self.execute(
            "INSERT OR REPLACE INTO messages (session_id, seq, turn, scope, data_json, created_at) "
            "VALUES (?,?,?,?,?,?)",
            (sid, seq, turn, scope, dumps(message.to_json()), time.time()),
        )

    def load_messages(self, sid: str, scope: str = "main") -> list[tuple[int, Message]]:
        import json

        rows = self.query(
            "SELECT turn, data_json FROM messages WHERE session_id=? AND scope=? ORDER BY seq",
            (sid, scope),
        )
        return [(r["turn"], Message.from_json(json.loads(r["data_json"]))) for r in rows]
