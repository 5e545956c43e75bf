"""Stored Responses (`fugu serve`'s `store` and `previous_response_id`): each response's own input and output
items, the session it ran in and the key that made it, until it expires; and notes on what a call could
not honour (a parameter no worker takes, a client's tools an agent model ignores). Texts are redacted as
they are written. Never prints."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from fugu_cli.redact import redact
from fugu_cli.store.connection import Connection


@dataclass(frozen=True)
class StoredResponse:
    id: str
    owner: str  # who may read it: a digest of the bearer key that made it ("" without a key)
    session_id: str
    previous_id: str | None
    model: str
    input: list[dict[str, Any]]
    output: list[dict[str, Any]]
    response: dict[str, Any]
    created_at: float
    expires_at: float


@dataclass(frozen=True)
class NoteRow:
    session_id: str
    turn: int
    step: int
    text: str
    created_at: float


class ResponseTables(Connection):
    """Responses kept for a later `previous_response_id`, and notes on calls."""

    def save_response(self, r: StoredResponse) -> None:
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM responses WHERE expires_at <= ?", (now,))
            db.execute(
                "INSERT OR REPLACE INTO responses (id, owner, session_id, previous_id, model, input_json, "
                "output_json, response_json, created_at, expires_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    r.id,
                    r.owner,
                    r.session_id,
                    r.previous_id,
                    r.model,
                    redact(json.dumps(r.input, ensure_ascii=False)),
                    redact(json.dumps(r.output, ensure_ascii=False)),
                    redact(json.dumps(r.response, ensure_ascii=False)),
                    r.created_at,
                    r.expires_at,
                ),
            )

    def get_response(self, rid: str, owner: str) -> StoredResponse | None:
        """The response `rid` if `owner` made it and it has not expired."""
        rows = self.query(
            "SELECT * FROM responses WHERE id=? AND owner=? AND expires_at > ?", (rid, owner, time.time())
        )
        if not rows:
            return None
        row = dict(rows[0])
        return StoredResponse(
            id=row["id"],
            owner=row["owner"],
            session_id=row["session_id"],
            previous_id=row["previous_id"],
            model=row["model"],
            input=json.loads(row["input_json"]),
            output=json.loads(row["output_json"]),
            response=json.loads(row["response_json"]),
            created_at=row["created_at"],
            expires_at=row["expires_at"],
        )

    def delete_response(self, rid: str, owner: str) -> bool:
        with self._transaction() as db:
            cursor = db.execute("DELETE FROM responses WHERE id=? AND owner=?", (rid, owner))
            return cursor.rowcount > 0

    # notes

    def add_note(self, sid: str, turn: int, step: int, text: str) -> None:
        self._execute(
            "INSERT INTO notes (session_id, turn, step, text, created_at) VALUES (?,?,?,?,?)",
            (sid, turn, step, redact(text), time.time()),
        )

    def notes(self, sid: str) -> list[NoteRow]:
        rows = self.query("SELECT * FROM notes WHERE session_id=? ORDER BY rowid", (sid,))
        return [NoteRow(**dict(r)) for r in rows]
