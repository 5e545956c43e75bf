"""The store and the ledger: typed writes that redact, sequence numbers that never collide, migrations that
survive many first runs at once, and a home that cannot be used saying so in one line."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fugu_cli.errors import ConfigError
from fugu_cli.ledger import Ledger
from fugu_cli.store import MIGRATIONS, StepRecord, Store, new_session_id
from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, Usage

ROOT = Path(__file__).resolve().parents[1]


def test_a_turn_ledger_records_routes_steps_and_calls_with_their_decision(tmp_path: Path) -> None:
    store = Store(tmp_path / "fugu.db")
    store.create_session("s1", "/repo", "fugu", "[]", "prior")
    turn = Ledger(store, "s1").turn(2)
    turn.route(1, RouteDecision("alpha", {"alpha": 0.4, "beta": 0.6}, "prior", 1.0))
    turn.route(1, RouteDecision("beta", {"beta": 1.0}, "fallback", 0.5, reason="alpha failed"))
    turn.step(
        StepRecord(1, RouteDecision("beta", {}, "fallback", 0.5), "ok", Usage(10, 5, 0, 0.25), "hi", 1.0)
    )
    turn.tool_call(1, "beta", ToolCall("c1", "git_status", "{}"), ToolResult("c1", "git_status", "clean"))
    (step,) = Ledger(store, "s1").steps()
    assert (step.turn, step.step, step.worker, step.reason, step.scores) == (
        2,
        1,
        "beta",
        "alpha failed",
        {"beta": 1.0},
    )
    (c,) = Ledger(store, "s1").tool_calls(turn=2)
    assert (c.agent, c.call_id, c.tool, c.result) == ("beta", "c1", "git_status", "clean")
    assert store.get_session("s1") is not None and store.get_session("s1").cost_usd == 0.25  # type: ignore[union-attr]
    assert Ledger(store, "s1", "wf1.s0").tool_calls() == []


def test_a_batch_of_writes_is_one_transaction_all_or_none(tmp_path: Path) -> None:
    """`batch`: write methods with transactions of their own (a step) join the batch's one transaction; a
    write that fails takes back the ones before it, and the store goes on writing afterwards."""
    store = Store(tmp_path / "fugu.db")
    step = StepRecord(1, RouteDecision("alpha", {}, "prior", 0.1), "ok", Usage(1, 1, 0, 0.5), "hi", 1.0)
    turn = Ledger(store, "s1").turn(1)
    store.batch(
        [
            lambda: store.create_session("s1", "/repo", "pass", "[]", "prior"),
            lambda: turn.route(1, RouteDecision("alpha", {"alpha": 1.0}, "prior", 0.1)),
            lambda: turn.step(step),
        ]
    )
    assert [s.worker for s in Ledger(store, "s1").steps()] == ["alpha"]
    assert store.get_session("s1").cost_usd == 0.5  # type: ignore[union-attr]

    def broken() -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with pytest.raises(sqlite3.OperationalError):
        store.batch([lambda: store.create_session("s2", "/repo", "pass", "[]", "prior"), broken])
    assert store.get_session("s2") is None
    store.create_session("s3", "/repo", "pass", "[]", "prior")  # not left inside a transaction
    with sqlite3.connect(tmp_path / "fugu.db") as other:  # committed: another connection reads it
        assert other.execute("SELECT count(*) FROM sessions").fetchone() == (2,)


def test_session_ids_made_in_one_second_do_not_collide() -> None:
    """fugu serve makes a session per new conversation, thousands a second under load: 20,000 ids made at
    once are all different (with the 24 random bits ids had, about a dozen would have collided)."""
    ids = [new_session_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)


def test_every_text_written_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("ACME_API_KEY", secret)
    store = Store(tmp_path / "fugu.db")
    store.create_session("s1", "/repo", "fugu", "[]", "prior")
    turn = Ledger(store, "s1").turn(1)
    store.begin_turn("s1", 1, f"use {secret}")
    turn.message(Message("assistant", f"key is {secret}", (ToolCall("c1", "shell", f'{{"k": "{secret}"}}'),)))
    turn.tool_call(1, "a", ToolCall("c1", "shell", f'{{"k": "{secret}"}}'), ToolResult("c1", "shell", secret))
    store.touch_session("s1", title=f"title {secret}")
    dump = "\n".join(
        str(tuple(r))
        for t in ("messages", "tool_calls", "turns", "sessions")
        for r in store.query(f"SELECT * FROM {t}")
    )
    assert secret not in dump and "[ACME_API_KEY]" in dump


def test_the_turn_row_exists_before_the_turn_ends_and_keeps_its_checkpoint(tmp_path: Path) -> None:
    store = Store(tmp_path / "fugu.db")
    store.begin_turn("s1", 1, "edit things")
    store.set_checkpoint("s1", 1, "abc123")
    assert store.checkpoints("s1") == {1: "abc123"}
    assert [tuple(r) for r in store.query("SELECT status FROM turns")] == [("running",)]
    store.finish_turn("s1", 1, "success", "done", 0.5)
    assert [tuple(r) for r in store.query("SELECT status, checkpoint FROM turns")] == [("success", "abc123")]
    store.set_checkpoint("s1", 1, None)
    assert store.checkpoints("s1") == {}


WRITER = """
import sys
from pathlib import Path
from fugu_cli.store import Store
from fugu_cli.types import Message
store = Store(Path(sys.argv[1]))
for i in range(15):
    store.append_message("s1", "main", 1, Message("user", f"{sys.argv[2]}-{i}"))
"""


def test_concurrent_writers_of_one_session_lose_no_message(tmp_path: Path) -> None:
    db = tmp_path / "fugu.db"
    Store(db).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"w{n}"], cwd=ROOT) for n in range(6)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    rows = Store(db).query("SELECT seq, data_json FROM messages WHERE session_id='s1' ORDER BY seq")
    assert [r["seq"] for r in rows] == list(range(90))
    texts = [m.content for _, m in Store(db).load_messages("s1")]
    assert sorted(texts) == sorted(f"w{n}-{i}" for n in range(6) for i in range(15))  # type: ignore[type-var]


OPENER = "import sys; from pathlib import Path; from fugu_cli.store import Store; Store(Path(sys.argv[1]))"


def test_many_first_runs_at_once_migrate_once(tmp_path: Path) -> None:
    db = tmp_path / "home" / "fugu.db"
    procs = [
        subprocess.Popen([sys.executable, "-c", OPENER, str(db)], cwd=ROOT, stderr=subprocess.PIPE)
        for _ in range(12)
    ]
    errors = [p.communicate(timeout=600)[1].decode() for p in procs]  # a hang guard, not a bound
    assert [p.returncode for p in procs] == [0] * 12, errors
    assert Store(db).query("PRAGMA user_version")[0][0] == len(MIGRATIONS)


def test_an_unusable_home_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"cannot be used .*Set FUGU_HOME"):
        Store(tmp_path / "file" / "fugu.db")
    (tmp_path / "corrupt.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ConfigError, match=r"corrupt\.db cannot be used"):
        Store(tmp_path / "corrupt.db")
    newer = tmp_path / "newer.db"
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    con.close()
    with pytest.raises(ConfigError, match="newer than this fugu knows"):
        Store(newer)
