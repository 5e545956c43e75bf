"""Sessions, their transcripts (messages and compactions), turns and /undo checkpoints, and the file lock
that lets one run at a time write a session. Never prints."""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fugu_cli.redact import redact
from fugu_cli.store.connection import Connection, file_lock, redact_opt
from fugu_cli.store.rows import (
    CompactionRecord,
    CompactionRow,
    EditCheckpointRow,
    SessionRow,
    TurnRow,
)
from fugu_cli.types import Message, dumps


def new_session_id() -> str:
    """The time to the second, then 48 random bits. (Until 2026-12-02 24 bits: fugu serve makes a session
    per new conversation, and at a few thousand a second two in one second met about once a second.)"""
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(6)


class SessionTables(Connection):
    """Sessions and what they said."""

    # sessions

    def create_session(
        self, sid: str, cwd: str, mode: str, pool_json: str, router: str, *, title: str | None = None
    ) -> None:
        now = time.time()
        self._execute(
            "INSERT INTO sessions (id, created_at, updated_at, cwd, mode, pool_json, router, title) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (sid, now, now, cwd, mode, redact(pool_json), router, redact(title or "")),
        )

    def touch_session(self, sid: str, *, title: str | None = None, cost_delta: float = 0.0) -> None:
        title = redact_opt(title)
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
        with file_lock(self.path.parent / "locks" / f"{sid}.lock"):
            yield

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

    def turns(self, sid: str) -> list[TurnRow]:
        rows = self.query(
            "SELECT turn, task, status, result, cost_usd, created_at FROM turns WHERE session_id=?"
            " ORDER BY turn",
            (sid,),
        )
        return [TurnRow(**dict(r)) for r in rows]

    def set_checkpoint(self, sid: str, turn: int, checkpoint: str | None) -> None:
        self._execute("UPDATE turns SET checkpoint=? WHERE session_id=? AND turn=?", (checkpoint, sid, turn))

    def checkpoints(self, sid: str) -> dict[int, str]:
        """The session's unused /undo checkpoints, by turn ('' where a turn had none)."""
        rows = self.query(
            "SELECT turn, checkpoint FROM turns WHERE session_id=? AND checkpoint != ''", (sid,)
        )
        return {int(r["turn"]): str(r["checkpoint"]) for r in rows}

    # per-edit checkpoints (/rewind)

    def add_edit_checkpoint(
        self, sid: str, turn: int, kind: str, sha: str, call_id: str = "", tool: str = ""
    ) -> EditCheckpointRow:
        """Record a checkpoint, with the main transcript's stored message count as it is now."""
        with self._transaction() as db:
            seq = int(
                db.execute(
                    "SELECT COALESCE(MAX(seq) + 1, 1) FROM edit_checkpoints WHERE session_id=?", (sid,)
                ).fetchone()[0]
            )
            count = int(
                db.execute(
                    "SELECT COUNT(*) FROM messages WHERE session_id=? AND scope='main'", (sid,)
                ).fetchone()[0]
            )
            row = EditCheckpointRow(seq, turn, kind, sha, call_id, tool, count, time.time())
            db.execute(
                "INSERT INTO edit_checkpoints (session_id, seq, turn, kind, sha, call_id, tool, messages,"
                " created_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (sid, *dataclasses.astuple(row)),
            )
        return row

    def edit_checkpoints(self, sid: str) -> list[EditCheckpointRow]:
        rows = self.query(
            "SELECT seq, turn, kind, sha, call_id, tool, messages, created_at FROM edit_checkpoints"
            " WHERE session_id=? ORDER BY seq",
            (sid,),
        )
        return [EditCheckpointRow(**dict(r)) for r in rows]
