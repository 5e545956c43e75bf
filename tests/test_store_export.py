"""Moving a session between stores (a cluster node's scratch store -> the user's): every row of every session
table arrives once, redacted again with the importing process's secrets, and a bad export writes nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fugu_cli.errors import ConfigError
from fugu_cli.ledger import Ledger
from fugu_cli.store import (
    SESSION_TABLES,
    CompactionRecord,
    FactRow,
    HookRunRecord,
    OutcomeRow,
    StepRecord,
    Store,
    StoredResponse,
    TableRows,
)
from fugu_cli.types import AttemptRecord, Message, RouteDecision, ToolCall, ToolResult, Usage

SECRET = "tok-4c0ffee-9a8b7c6d5e"


def fill(store: Store, sid: str, text: str) -> None:
    """One row (at least) in every session table, each text column holding `text`."""
    store.create_session(sid, "/node/repo", "fugu", f'[{{"name": "{text}"}}]', "prior")
    store.touch_session(sid, title=f"title {text}")
    store.begin_turn(sid, 1, f"task {text}")
    turn = Ledger(store, sid).turn(1)
    turn.message(Message("user", f"please {text}"))
    turn.route(1, RouteDecision("alpha", {"alpha": 1.0}, "prior", 2.0, reason=f"why {text}"))
    turn.step(StepRecord(1, RouteDecision("alpha", {}, "prior", 2.0), "ok", Usage(9, 3, 0, 0.5), text, 1.0))
    call = ToolCall("c1", "shell", f'{{"command": "echo {text}"}}')
    turn.tool_call(1, "alpha", call, ToolResult("c1", "shell", f"out {text}"))
    store.finish_turn(sid, 1, "success", f"done {text}", 0.5)
    store.set_checkpoint(sid, 1, "abc123")
    store.add_facts(sid, 1, [FactRow(1, "command", f"key {text}", f"value {text}", "alpha")])
    head = (Message("user", f"summary {text}"),)
    store.add_compaction(sid, "main", 1, CompactionRecord(head, 1, 100, 10, "user", "alpha", "alpha", text))
    store.add_outcome(OutcomeRow(f"task {text}", "alpha", 1.0, 0.5, "eval:mini", sid))
    hook = HookRunRecord(
        "PreToolUse", "shell", f"check {text}", 0, False, "ok", f"out {text}", f"err {text}", 3.0
    )
    store.add_hook_run(sid, "main", 1, hook)
    item = {"type": "message", "role": "user", "content": f"ask {text}"}
    response = StoredResponse(
        f"resp_{sid}", "", sid, None, "fugu", [item], [item], {"id": f"resp_{sid}", "note": text}, 1.0, 9e12
    )
    store.save_response(response)
    store.add_note(sid, 1, 1, f"client_metadata: {text}")
    attempt = AttemptRecord("alpha", 0.5, 1, "failed", "check", f"pytest {text}", 1, "refs/fugu/x")
    turn.attempt(1, attempt, f"output {text}")


def rows(store: Store, sid: str) -> dict[str, list[tuple[object, ...]]]:
    return {
        t: [tuple(r) for r in store.query(f"SELECT * FROM {t} WHERE {key}=? ORDER BY rowid", (sid,))]
        for t, (key, _) in SESSION_TABLES.items()
    }


def test_an_imported_session_equals_the_exported_one_and_arrives_once(tmp_path: Path) -> None:
    node, home = Store(tmp_path / "node.db"), Store(tmp_path / "home.db")
    fill(node, "s1", "one")
    fill(node, "s2", "two")
    fill(home, "mine", "local")
    export = node.export_session("s1")
    assert {t.table for t in export.tables} == set(SESSION_TABLES)
    assert all(export.rows(t) for t in SESSION_TABLES)  # the fixture reaches every table

    assert home.import_session(export) is True
    assert rows(home, "s1") == rows(node, "s1")  # every column, timestamps included
    before = {t: len(home.query(f"SELECT * FROM {t}")) for t in SESSION_TABLES}
    assert home.import_session(export) is False  # a retried shipment doubles nothing
    assert {t: len(home.query(f"SELECT * FROM {t}")) for t in SESSION_TABLES} == before
    assert rows(home, "s2") == {t: [] for t in SESSION_TABLES}
    assert rows(home, "mine")["outcomes"] and home.get_session("s1") is not None
    with pytest.raises(KeyError):
        node.export_session("nope")


def test_every_table_keyed_by_session_is_shipped(tmp_path: Path) -> None:
    """A migration that adds a table with a session column must add it to SESSION_TABLES too, or rows of
    eval jobs run on a cluster would stay on the nodes."""
    store = Store(tmp_path / "fugu.db")
    tables = [r["name"] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")]
    keyed = {
        t for t in tables if {"session_id"} & {c["name"] for c in store.query(f"PRAGMA table_info({t})")}
    }
    assert keyed | {"sessions"} == set(SESSION_TABLES)


def test_import_redacts_with_the_secrets_this_process_knows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node, home = Store(tmp_path / "node.db"), Store(tmp_path / "home.db")
    fill(node, "s1", SECRET)  # the node did not know this secret: its store holds it in clear
    export = node.export_session("s1")
    for table, (_, texts) in SESSION_TABLES.items():
        for column in texts:
            assert any(SECRET in str(v) for v in _column(export.tables, table, column)), (table, column)
    monkeypatch.setenv("BILLING_SERVICE_TOKEN", SECRET)
    home.import_session(export)
    dump = "\n".join(str(r) for rs in rows(home, "s1").values() for r in rs)
    assert SECRET not in dump and dump.count("[BILLING_SERVICE_TOKEN]") >= 12


def _column(tables: tuple[TableRows, ...], table: str, column: str) -> list[object]:
    part = next(t for t in tables if t.table == table)
    i = part.columns.index(column)
    return [r[i] for r in part.rows]


def _with(part: TableRows, column: str, value: object) -> TableRows:
    i = part.columns.index(column)
    return dataclasses.replace(part, rows=tuple((*r[:i], value, *r[i + 1 :]) for r in part.rows))


def test_a_bad_export_writes_nothing(tmp_path: Path) -> None:
    node, home = Store(tmp_path / "node.db"), Store(tmp_path / "home.db")
    fill(node, "s1", "one")
    good = node.export_session("s1")
    newer = dataclasses.replace(good, schema=good.schema + 1)
    with pytest.raises(ConfigError, match="same fugu version"):
        home.import_session(newer)
    foreign = dataclasses.replace(good, tables=(*good.tables, TableRows("sqlite_master", ("x",), ((1,),))))
    renamed = tuple(
        dataclasses.replace(t, columns=(*t.columns[:-1], "evil")) if t.table == "steps" else t
        for t in good.tables
    )
    stray = tuple(_with(t, "session_id", "other") if t.table == "outcomes" else t for t in good.tables)
    for bad in (foreign, dataclasses.replace(good, tables=renamed), dataclasses.replace(good, tables=stray)):
        with pytest.raises(ValueError):
            home.import_session(bad)
    assert rows(home, "s1") == {t: [] for t in SESSION_TABLES}  # each failed import rolled back whole
    assert home.import_session(good) is True
