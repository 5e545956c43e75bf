"""SQLite store under FUGU_HOME: sessions, transcripts, steps, route decisions, tool calls, memory, outcomes.

Append-only tables with short numbered migrations; WAL so readers never block the session that writes.
The only module that speaks SQL: everyone else calls its typed methods, which redact every text they store,
so no writer can forget (a session exported from another store is redacted again as it is imported).
Never prints.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.errors import ConfigError
from fugu_cli.redact import redact as redact  # the one redactor (fugu_cli/redact.py)
from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, Usage, dumps

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
    # compaction: the transcript a worker sees is `head` followed by the stored messages from `upto` on;
    # the stored messages themselves are never changed
    """
    CREATE TABLE compactions (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, upto INTEGER NOT NULL,
        head_json TEXT NOT NULL, tokens_before INTEGER NOT NULL, tokens_after INTEGER NOT NULL,
        trigger TEXT NOT NULL, worker TEXT NOT NULL, summarizer TEXT NOT NULL DEFAULT '',
        focus TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL
    );
    CREATE INDEX compactions_session ON compactions (session_id, scope);
    """,
    # hooks (issue 14): every run of a user's hook command, with what it decided
    """
    CREATE TABLE hook_runs (
        session_id TEXT NOT NULL, scope TEXT NOT NULL, turn INTEGER NOT NULL, step INTEGER NOT NULL,
        agent TEXT NOT NULL, event TEXT NOT NULL, matcher TEXT NOT NULL, command TEXT NOT NULL,
        tool TEXT NOT NULL DEFAULT '', call_id TEXT NOT NULL DEFAULT '', exit_code INTEGER,
        timed_out INTEGER NOT NULL, outcome TEXT NOT NULL, stdout TEXT NOT NULL, stderr TEXT NOT NULL,
        duration_ms REAL NOT NULL, created_at REAL NOT NULL
    );
    CREATE INDEX hook_runs_session ON hook_runs (session_id, turn);
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


@dataclass(frozen=True)
class ToolCallRow:
    turn: int
    step: int
    agent: str
    call_id: str
    tool: str
    arguments: str
    result: str
    is_error: bool
    denied: bool
    exit_code: int | None
    duration_ms: float
    files: tuple[str, ...]


@dataclass(frozen=True)
class StepRow:
    """A step with the route decision that chose its worker (the last one made for that step)."""

    turn: int
    step: int
    worker: str
    source: str
    role: str | None
    status: str
    usage: Usage
    text: str
    scores: dict[str, float]
    reason: str
    latency_ms: float
    started_at: float = 0.0
    finished_at: float = 0.0


@dataclass(frozen=True)
class StepRecord:
    """What the ledger writes for one step (one LLM call and its tool calls)."""

    step: int
    decision: RouteDecision
    status: str  # ok | interrupted | provider_error
    usage: Usage
    text: str
    started_at: float


@dataclass(frozen=True)
class CompactionRecord:
    """One compaction: `head` replaces every stored message of the scope before the last `kept` ones."""

    head: tuple[Message, ...]
    kept: int
    tokens_before: int
    tokens_after: int
    trigger: str  # threshold | no-fit | overflow | user
    worker: str  # whose tokenizer counted the tokens
    summarizer: str = ""
    focus: str = ""


@dataclass(frozen=True)
class CompactionRow:
    turn: int
    upto: int
    head: tuple[Message, ...]
    tokens_before: int
    tokens_after: int
    trigger: str
    worker: str
    summarizer: str
    focus: str
    created_at: float


@dataclass(frozen=True)
class HookRunRecord:
    """One run of a hook command: where it ran, how it ended and what fugu made of it (`outcome`: ok,
    blocked, denied, allowed, asked, modified, context, error, timeout)."""

    event: str
    matcher: str
    command: str
    exit_code: int | None
    timed_out: bool
    outcome: str
    stdout: str
    stderr: str
    duration_ms: float
    agent: str = ""
    tool: str = ""
    call_id: str = ""
    step: int = 0
    turn: int = 0


@dataclass(frozen=True)
class FactRow:
    workflow: int
    kind: str
    key: str
    value: str
    agent: str


@dataclass(frozen=True)
class OutcomeRow:
    task: str
    worker: str
    reward: float
    cost_usd: float
    source: str
    session_id: str | None


# Every table keyed by session, with the column holding the id, and the texts its typed writers redact: what
# `export_session` ships and `import_session` writes (redacting the same columns again, with this process's
# secrets). A table added by a migration and keyed by session belongs here too.
SESSION_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "sessions": ("id", ("title", "pool_json")),
    "messages": ("session_id", ("data_json",)),
    "steps": ("session_id", ("text",)),
    "route_decisions": ("session_id", ("reason",)),
    "tool_calls": ("session_id", ("arguments", "result")),
    "turns": ("session_id", ("task", "result")),
    "memory_facts": ("session_id", ("key", "value")),
    "compactions": ("session_id", ("head_json", "focus")),
    "hook_runs": ("session_id", ("command", "stdout", "stderr")),
    "outcomes": ("session_id", ("task",)),
}


@dataclass(frozen=True)
class TableRows:
    """One table's rows of one session, in the order they were written."""

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class SessionExport:
    """Every row of one session (its ledger, transcript, memory, compactions, hook runs and outcomes), as
    another store can import it: what a cluster node running an eval job ships back to the store of the user
    who ran it."""

    session_id: str
    schema: int  # the exporting store's schema version
    tables: tuple[TableRows, ...]

    def rows(self, table: str) -> tuple[tuple[Any, ...], ...]:
        return next((t.rows for t in self.tables if t.table == table), ())


_HOOK_CAP = 8000  # characters of a hook's stdout or stderr kept in the ledger


def _redact_opt(text: str | None) -> str | None:
    return None if text is None else redact(text)


def new_session_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class Store:
    """One SQLite file. Thread-safe: one connection, one lock (the session writes from worker threads)."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        """`readonly`: read another fugu's store (e.g. to train on its outcomes); never migrates or writes."""
        self.path = path
        self._lock = threading.RLock()
        try:
            if readonly:
                uri = f"file:{path}?mode=ro"
                self._db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
                self._db.row_factory = sqlite3.Row
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version != len(MIGRATIONS):
                    raise sqlite3.DatabaseError(f"it is not a fugu store of this version (schema {version})")
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except (OSError, sqlite3.Error) as e:
            if readonly:
                raise ConfigError(f"cannot read {path} as a fugu store ({_why(e)})") from None
            raise ConfigError(
                f"the fugu store {path} cannot be used ({_why(e)}). Set FUGU_HOME to a writable folder, "
                "or move the file away."
            ) from None

    def _migrate(self) -> None:
        with self._lock:
            if self._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS):
                return
            # EXCLUSIVE: of many first runs at once, one migrates and the others wait, then find it done
            self._db.execute("BEGIN EXCLUSIVE")
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
                if version > len(MIGRATIONS):
                    raise sqlite3.DatabaseError(
                        f"its schema version {version} is newer than this fugu knows ({len(MIGRATIONS)}); "
                        "upgrade fugu"
                    )
                for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                    for statement in script.split(";"):
                        if statement.strip():
                            self._db.execute(statement)
                    self._db.execute(f"PRAGMA user_version = {i}")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        with self._lock:
            self._db.execute(sql, args)

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Read-only inspection (tests, diagnostics); fugu's own reads go through the typed methods."""
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    # sessions

    def create_session(self, sid: str, cwd: str, mode: str, pool_json: str, router: str) -> None:
        now = time.time()
        self._execute(
            "INSERT INTO sessions (id, created_at, updated_at, cwd, mode, pool_json, router) "
            "VALUES (?,?,?,?,?,?,?)",
            (sid, now, now, cwd, mode, redact(pool_json), router),
        )

    def touch_session(self, sid: str, *, title: str | None = None, cost_delta: float = 0.0) -> None:
        title = _redact_opt(title)
        self._execute(
            "UPDATE sessions SET updated_at=?, cost_usd=cost_usd+?, "
            "title=CASE WHEN title='' AND ? IS NOT NULL THEN ? ELSE title END WHERE id=?",
            (time.time(), cost_delta, title, title, sid),
        )

    def get_session(self, sid: str) -> SessionRow | None:
        """The session with this id, or the only one whose id starts with it."""
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

    @contextmanager
    def session_lock(self, sid: str) -> Iterator[None]:
        """Hold the session for one turn across processes: two `fugu --continue` on one session take turns
        instead of interleaving their transcripts (a file lock beside the database)."""
        try:
            import fcntl
        except ImportError:  # no flock on this platform: turns are serialised within one process only
            yield
            return
        path = self.path.parent / "locks" / f"{sid}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    # transcripts

    def append_message(self, sid: str, scope: str, turn: int, message: Message) -> int:
        """Append `message` to a transcript; returns its sequence number (the store assigns it, so writers
        that share a session never overwrite each other)."""
        data = redact(dumps(message.to_json()))
        with self._transaction() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id=? AND scope=?", (sid, scope)
            ).fetchone()
            seq = int(row[0])
            db.execute(
                "INSERT INTO messages (session_id, seq, turn, scope, data_json, created_at) "
                "VALUES (?,?,?,?,?,?)",
                (sid, seq, turn, scope, data, time.time()),
            )
        return seq

    def load_messages(self, sid: str, scope: str = "main") -> list[tuple[int, Message]]:
        rows = self.query(
            "SELECT turn, data_json FROM messages WHERE session_id=? AND scope=? ORDER BY seq",
            (sid, scope),
        )
        return [(r["turn"], Message.from_json(json.loads(r["data_json"]))) for r in rows]

    def last_turn(self, sid: str, scope: str = "main") -> int:
        rows = self.query("SELECT MAX(turn) AS n FROM messages WHERE session_id=? AND scope=?", (sid, scope))
        return int(rows[0]["n"] or 0)

    def message_count(self, sid: str, scope: str = "main") -> int:
        rows = self.query("SELECT COUNT(*) AS n FROM messages WHERE session_id=? AND scope=?", (sid, scope))
        return int(rows[0]["n"])

    # compactions: what a worker sees of a long transcript (the messages above stay as they were)

    def add_compaction(self, sid: str, scope: str, turn: int, record: CompactionRecord) -> int:
        """Record a compaction of the scope's transcript; returns the stored messages it replaces."""
        head = redact(dumps([m.to_json() for m in record.head]))
        with self._transaction() as db:
            count = db.execute(
                "SELECT COUNT(*) FROM messages WHERE session_id=? AND scope=?", (sid, scope)
            ).fetchone()[0]
            upto = max(int(count) - record.kept, 0)
            db.execute(
                "INSERT INTO compactions (session_id, scope, turn, upto, head_json, tokens_before,"
                " tokens_after, trigger, worker, summarizer, focus, created_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sid,
                    scope,
                    turn,
                    upto,
                    head,
                    record.tokens_before,
                    record.tokens_after,
                    record.trigger,
                    record.worker,
                    record.summarizer,
                    redact(record.focus),
                    time.time(),
                ),
            )
        return upto

    def compactions(self, sid: str, scope: str = "main") -> list[CompactionRow]:
        rows = self.query(
            "SELECT * FROM compactions WHERE session_id=? AND scope=? ORDER BY rowid", (sid, scope)
        )
        return [
            CompactionRow(
                turn=r["turn"],
                upto=r["upto"],
                head=tuple(Message.from_json(m) for m in json.loads(r["head_json"])),
                tokens_before=r["tokens_before"],
                tokens_after=r["tokens_after"],
                trigger=r["trigger"],
                worker=r["worker"],
                summarizer=r["summarizer"],
                focus=r["focus"],
                created_at=r["created_at"],
            )
            for r in rows
        ]

    def transcript(self, sid: str, scope: str = "main") -> list[Message]:
        """What a worker sees of the scope's transcript: the latest compaction's head, then every message
        stored after the part it replaced (all stored messages when there was none)."""
        messages = [m for _, m in self.load_messages(sid, scope)]
        rows = self.query(
            "SELECT upto, head_json FROM compactions WHERE session_id=? AND scope=?"
            " ORDER BY rowid DESC LIMIT 1",
            (sid, scope),
        )
        if not rows:
            return messages
        head = [Message.from_json(m) for m in json.loads(rows[0]["head_json"])]
        return head + messages[int(rows[0]["upto"]) :]

    # turns: the row exists from the turn's start, so /undo finds its checkpoint even after a crash

    def begin_turn(self, sid: str, turn: int, task: str) -> None:
        self._execute(
            "INSERT OR REPLACE INTO turns (session_id, turn, task, status, result, cost_usd, checkpoint,"
            " created_at) VALUES (?,?,?,'running','',0,NULL,?)",
            (sid, turn, redact(task), time.time()),
        )

    def finish_turn(self, sid: str, turn: int, status: str, result: str, cost_usd: float) -> None:
        self._execute(
            "UPDATE turns SET status=?, result=?, cost_usd=? WHERE session_id=? AND turn=?",
            (status, redact(result), cost_usd, sid, turn),
        )

    def set_checkpoint(self, sid: str, turn: int, checkpoint: str | None) -> None:
        self._execute("UPDATE turns SET checkpoint=? WHERE session_id=? AND turn=?", (checkpoint, sid, turn))

    def checkpoints(self, sid: str) -> dict[int, str]:
        """The session's unused /undo checkpoints, by turn ('' where a turn had none)."""
        rows = self.query(
            "SELECT turn, checkpoint FROM turns WHERE session_id=? AND checkpoint != ''", (sid,)
        )
        return {int(r["turn"]): str(r["checkpoint"]) for r in rows}

    # the ledger: route decisions, steps, tool calls (one scope per transcript)

    def add_route(self, sid: str, scope: str, turn: int, step: int, d: RouteDecision) -> None:
        self._execute(
            "INSERT INTO route_decisions (session_id, scope, turn, step, worker, source, role, scores_json,"
            " latency_ms, reason, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                sid,
                scope,
                turn,
                step,
                d.worker,
                d.source,
                d.role,
                dumps({k: float(v) for k, v in d.scores.items()}),
                d.latency_ms,
                redact(d.reason),
                time.time(),
            ),
        )

    def add_step(self, sid: str, scope: str, turn: int, r: StepRecord) -> None:
        u = r.usage
        with self._transaction() as db:
            db.execute(
                "INSERT INTO steps (session_id, scope, turn, step, worker, source, role, status,"
                " prompt_tokens, completion_tokens, cached_tokens, cost_usd, text, started_at, finished_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sid,
                    scope,
                    turn,
                    r.step,
                    r.decision.worker,
                    r.decision.source,
                    r.decision.role,
                    r.status,
                    u.prompt_tokens,
                    u.completion_tokens,
                    u.cached_tokens,
                    u.cost_usd,
                    redact(r.text),
                    r.started_at,
                    time.time(),
                ),
            )
            db.execute(
                "UPDATE sessions SET updated_at=?, cost_usd=cost_usd+? WHERE id=?",
                (time.time(), u.cost_usd, sid),
            )

    def add_tool_call(
        self, sid: str, scope: str, turn: int, step: int, agent: str, call: ToolCall, result: ToolResult
    ) -> None:
        self._execute(
            "INSERT INTO tool_calls (session_id, scope, turn, step, agent, call_id, tool, arguments, result,"
            " is_error, denied, exit_code, duration_ms, files_json, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                sid,
                scope,
                turn,
                step,
                agent,
                call.id,
                call.name,
                redact(call.arguments),
                redact(result.content),
                int(result.is_error),
                int(result.denied),
                result.exit_code,
                result.duration_ms,
                dumps(list(result.files_touched)),
                time.time(),
            ),
        )

    def tool_calls(self, sid: str, scope: str, turn: int | None = None) -> list[ToolCallRow]:
        sql = "SELECT * FROM tool_calls WHERE session_id=? AND scope=?"
        args: list[object] = [sid, scope]
        if turn is not None:
            sql += " AND turn=?"
            args.append(turn)
        return [
            ToolCallRow(
                turn=r["turn"],
                step=r["step"],
                agent=r["agent"],
                call_id=r["call_id"],
                tool=r["tool"],
                arguments=r["arguments"],
                result=r["result"],
                is_error=bool(r["is_error"]),
                denied=bool(r["denied"]),
                exit_code=r["exit_code"],
                duration_ms=r["duration_ms"],
                files=tuple(json.loads(r["files_json"])),
            )
            for r in self.query(sql + " ORDER BY rowid", args)
        ]

    def steps(self, sid: str, scope: str) -> list[StepRow]:
        decisions: dict[tuple[int, int], tuple[dict[str, float], str, float]] = {}
        for r in self.query(
            "SELECT * FROM route_decisions WHERE session_id=? AND scope=? ORDER BY rowid", (sid, scope)
        ):
            decisions[(r["turn"], r["step"])] = (json.loads(r["scores_json"]), r["reason"], r["latency_ms"])
        out: list[StepRow] = []
        for r in self.query(
            "SELECT * FROM steps WHERE session_id=? AND scope=? ORDER BY rowid", (sid, scope)
        ):
            scores, reason, latency = decisions.get((r["turn"], r["step"]), ({}, "", 0.0))
            out.append(
                StepRow(
                    turn=r["turn"],
                    step=r["step"],
                    worker=r["worker"],
                    source=r["source"],
                    role=r["role"],
                    status=r["status"],
                    usage=Usage(
                        r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"], r["cost_usd"]
                    ),
                    text=r["text"],
                    scores=scores,
                    reason=reason,
                    latency_ms=latency,
                    started_at=r["started_at"],
                    finished_at=r["finished_at"],
                )
            )
        return out

    def scopes(self, sid: str) -> list[str]:
        """The session's ledger scopes in order of first use ("main", then ultra mode's "wf1.s0", ...)."""
        rows = self.query(
            "SELECT scope FROM steps WHERE session_id=? GROUP BY scope ORDER BY MIN(rowid)", (sid,)
        )
        return [r["scope"] for r in rows]

    # hooks

    def add_hook_run(self, sid: str, scope: str, turn: int, r: HookRunRecord) -> None:
        self._execute(
            "INSERT INTO hook_runs (session_id, scope, turn, step, agent, event, matcher, command, tool,"
            " call_id, exit_code, timed_out, outcome, stdout, stderr, duration_ms, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                *(sid, scope, turn, r.step, r.agent, r.event, r.matcher, redact(r.command), r.tool),
                *(r.call_id, r.exit_code, int(r.timed_out), r.outcome, redact(r.stdout[:_HOOK_CAP])),
                *(redact(r.stderr[:_HOOK_CAP]), r.duration_ms, time.time()),
            ),
        )

    def hook_runs(self, sid: str, scope: str | None = None) -> list[HookRunRecord]:
        sql, args = "SELECT * FROM hook_runs WHERE session_id=?", [sid]
        if scope is not None:
            sql, args = sql + " AND scope=?", [sid, scope]
        return [
            HookRunRecord(
                *(r["event"], r["matcher"], r["command"], r["exit_code"], bool(r["timed_out"]), r["outcome"]),
                *(r["stdout"], r["stderr"], r["duration_ms"], r["agent"], r["tool"], r["call_id"], r["step"]),
                turn=r["turn"],
            )
            for r in self.query(sql + " ORDER BY rowid", args)
        ]

    # memory across ultra-mode workflows

    def add_facts(self, sid: str, workflow: int, facts: Sequence[FactRow]) -> None:
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO memory_facts (session_id, workflow, kind, key, value, agent, created_at)"
                " VALUES (?,?,?,?,?,?,?)",
                [(sid, workflow, f.kind, redact(f.key), redact(f.value), f.agent, now) for f in facts],
            )

    def facts(self, sid: str) -> list[FactRow]:
        rows = self.query(
            "SELECT workflow, kind, key, value, agent FROM memory_facts WHERE session_id=? ORDER BY rowid",
            (sid,),
        )
        return [FactRow(r["workflow"], r["kind"], r["key"], r["value"], r["agent"]) for r in rows]

    def last_workflow(self, sid: str) -> int:
        rows = self.query("SELECT MAX(workflow) AS n FROM memory_facts WHERE session_id=?", (sid,))
        return int(rows[0]["n"] or 0)

    # outcomes: what router training learns from

    def add_outcome(self, row: OutcomeRow) -> None:
        self._execute(
            "INSERT INTO outcomes (task, worker, reward, cost_usd, source, session_id, created_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (redact(row.task), row.worker, row.reward, row.cost_usd, row.source, row.session_id, time.time()),
        )

    def outcomes(self) -> list[OutcomeRow]:
        rows = self.query(
            "SELECT task, worker, reward, cost_usd, source, session_id FROM outcomes ORDER BY rowid"
        )
        return [
            OutcomeRow(r["task"], r["worker"], r["reward"], r["cost_usd"], r["source"], r["session_id"])
            for r in rows
        ]

    # moving sessions between stores (a cluster node's scratch store -> the user's)

    def export_session(self, sid: str) -> SessionExport:
        """Every row of session `sid`, table by table (KeyError when there is no such session)."""
        tables = []
        with self._lock:
            if not self._db.execute("SELECT 1 FROM sessions WHERE id=?", (sid,)).fetchone():
                raise KeyError(sid)
            for table, (key, _) in SESSION_TABLES.items():
                cursor = self._db.execute(f"SELECT * FROM {table} WHERE {key}=? ORDER BY rowid", (sid,))
                columns = tuple(d[0] for d in cursor.description)
                tables.append(TableRows(table, columns, tuple(tuple(r) for r in cursor.fetchall())))
        return SessionExport(sid, len(MIGRATIONS), tuple(tables))

    def import_session(self, export: SessionExport) -> bool:
        """Write an exported session's rows, redacted again, in one transaction. A session already in this
        store is left as it is (False), so importing twice never doubles a row."""
        if export.schema != len(MIGRATIONS):
            raise ConfigError(
                f"session {export.session_id} comes from a fugu store of schema {export.schema}, this one is "
                f"{len(MIGRATIONS)}: run the same fugu version on every node"
            )
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM sessions WHERE id=?", (export.session_id,)).fetchone():
                return False
            for part in sorted(export.tables, key=lambda t: t.table != "sessions"):
                self._import_table(db, export.session_id, part)
        return True

    def _import_table(self, db: sqlite3.Connection, sid: str, part: TableRows) -> None:
        if part.table not in SESSION_TABLES:
            raise ValueError(f"not a session table: {part.table!r}")
        key, redacted = SESSION_TABLES[part.table]
        known = {r[1] for r in db.execute(f"PRAGMA table_info({part.table})")}
        unknown = [c for c in part.columns if c not in known]
        if unknown or key not in part.columns:
            raise ValueError(f"{part.table}: unknown columns {unknown} or no {key}")
        at = part.columns.index(key)
        clean = [i for i, c in enumerate(part.columns) if c in redacted]
        rows = []
        for row in part.rows:
            if row[at] != sid:
                raise ValueError(f"{part.table}: a row of session {row[at]!r} in the export of {sid!r}")
            values = list(row)
            for i in clean:
                values[i] = _redact_opt(values[i])
            rows.append(values)
        marks = ",".join("?" * len(part.columns))
        db.executemany(f"INSERT INTO {part.table} ({','.join(part.columns)}) VALUES ({marks})", rows)


def _why(e: BaseException) -> str:
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)
