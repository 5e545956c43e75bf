"""The store's one SQLite connection: opening (read-only, or migrating under a file lock so that many first
runs at once never meet SQLite's own locks), transactions, file locks beside the database, and the errors an
unusable file gives. The table methods live in sessions.py and ledger.py. Never prints."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fugu_cli.errors import ConfigError
from fugu_cli.redact import redact
from fugu_cli.store.schema import MIGRATIONS


def redact_opt(text: str | None) -> str | None:
    return None if text is None else redact(text)


class Connection:
    """One SQLite file. Thread-safe: one connection, one lock (the session writes from worker threads)."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        """`readonly`: read another fugu's store (e.g. to train on its outcomes); never migrates or writes."""
        self.path = path
        self._lock = threading.RLock()
        self._in_batch = False  # inside `batch`'s transaction: a write method's own transaction joins it
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
            # one opener at a time sets WAL and migrates: switching a fresh file to WAL takes SQLite's
            # exclusive lock, which can answer "database is locked" without waiting out the busy timeout
            with file_lock(path.parent / "locks" / "store.lock"):
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

    def batch(self, writes: Sequence[Callable[[], object]]) -> None:
        """`writes` (calls of this store's write methods) in one transaction: all or none, and one commit
        where each would have made its own."""
        with self._transaction():
            self._in_batch = True
            try:
                for write in writes:
                    write()
            finally:
                self._in_batch = False

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._in_batch:  # this thread's `batch` holds the lock: its transaction is this one
                yield self._db
                return
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


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if missing) across processes; where the platform has no
    flock, only this process's own threads are kept apart (by the callers' locks)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _why(e: BaseException) -> str:
    if isinstance(e, OSError):
        return e.strerror or str(e)
    return str(e)
