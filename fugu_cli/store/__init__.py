"""SQLite store under FUGU_HOME: sessions, transcripts, steps, route decisions, tool calls, memory, outcomes.

Append-only tables with short numbered migrations; WAL so readers never block the session that writes.
The only module that speaks SQL: everyone else calls its typed methods, which redact every text they store,
so no writer can forget (a session exported from another store is redacted again as it is imported).
Here: `Store` and moving sessions between stores; connection.py opens and migrates, schema.py holds the
migrations, sessions.py, ledger.py and responses.py the table methods, rows.py the typed rows. Never prints.
"""

from __future__ import annotations

import sqlite3

from fugu_cli.errors import ConfigError
from fugu_cli.redact import redact as redact  # the one redactor (fugu_cli/redact.py)
from fugu_cli.store.connection import redact_opt
from fugu_cli.store.ledger import LedgerTables
from fugu_cli.store.responses import NoteRow, ResponseTables, StoredResponse
from fugu_cli.store.rows import (
    CompactionRecord,
    CompactionRow,
    FactRow,
    HookRunRecord,
    OutcomeRow,
    SessionExport,
    SessionRow,
    StepRecord,
    StepRow,
    TableRows,
    ToolCallRow,
    TurnRow,
)
from fugu_cli.store.schema import MIGRATIONS, SESSION_TABLES
from fugu_cli.store.sessions import SessionTables, new_session_id

__all__ = [
    "MIGRATIONS",
    "SESSION_TABLES",
    "CompactionRecord",
    "CompactionRow",
    "FactRow",
    "HookRunRecord",
    "NoteRow",
    "OutcomeRow",
    "SessionExport",
    "SessionRow",
    "StepRecord",
    "StepRow",
    "Store",
    "StoredResponse",
    "TableRows",
    "ToolCallRow",
    "TurnRow",
    "new_session_id",
    "redact",
]


class Store(SessionTables, LedgerTables, ResponseTables):
    """One SQLite file. Thread-safe: one connection, one lock (the session writes from worker threads)."""

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
                values[i] = redact_opt(values[i])
            rows.append(values)
        marks = ",".join("?" * len(part.columns))
        db.executemany(f"INSERT INTO {part.table} ({','.join(part.columns)}) VALUES ({marks})", rows)
