"""Two workers on two loopback endpoints fix a failing test; one takes over by failover."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

from tests.helpers import FIXED, call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer


def test_two_workers_fix_a_failing_test_with_failover(tmp_path: Path, loopback_factory: object) -> None:
    a: LoopbackServer = loopback_factory()  # type: ignore[operator]
    b: LoopbackServer = loopback_factory()  # type: ignore[operator]
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "alpha",
                "model": "openai/alpha",
                "api_base": a.base_url,
                "priority": 2,
                "description": "reads code and runs tests",
                "price_in": 1.0,
                "price_out": 2.0,
            },
            {
                "name": "beta",
                "model": "openai/beta",
                "api_base": b.base_url,
                "priority": 1,
                "description": "edits code",
                "price_in": 0.5,
                "price_out": 1.0,
            },
        ],
    )
    a.script(
        "alpha",
        [
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(call("read_file", path="calc.py")),
            {"fault": 500},
            {"fault": 500},
            {"fault": 500},
            {"fault": 500},
        ],
    )
    b.script(
        "beta",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "Fixed: add() subtracted; it adds now and test_calc.py passes.",
        ],
    )
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text("[llm]\nbackoff_base_s = 0.01\n")
    run = fugu(
        "-p",
        "fix the failing test",
        "--pool",
        str(pool),
        "--output-format",
        "stream-json",
        "--permission-mode",
        "full-auto",
        cwd=repo,
    )
    assert run.code == 0, run.stderr
    assert (repo / "calc.py").read_text() == FIXED
    assert subprocess.run(["python3", "test_calc.py"], cwd=repo).returncode == 0

    events = run.events()
    routes = [e for e in events if e.get("subtype") == "route"]
    steps = sorted({e["step"] for e in routes})
    assert steps == [1, 2, 3, 4, 5]
    assert [(e["step"], e["worker"], e["source"]) for e in routes] == [
        (1, "alpha", "prior"),
        (2, "alpha", "prior"),
        (3, "alpha", "prior"),
        (3, "beta", "fallback"),
        (4, "beta", "prior"),
        (5, "beta", "prior"),
    ]
    assert all(set(e["scores"]) == {"alpha", "beta"} for e in routes)
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and not result["is_error"]
    assert result["num_turns"] == 5
    assert result["workers"]["alpha"]["steps"] == 2 and result["workers"]["beta"]["steps"] == 3
    assert result["total_cost_usd"] > 0

    db = sqlite3.connect(home / "fugu.db")
    rows = db.execute("SELECT step, agent, tool FROM tool_calls ORDER BY rowid").fetchall()
    assert rows == [
        (1, "alpha", "shell"),
        (2, "alpha", "read_file"),
        (3, "beta", "edit_file"),
        (4, "beta", "shell"),
    ]
    shown = fugu("sessions", "show", result["session_id"], cwd=repo)
    assert shown.code == 0
    assert "beta (fallback" in shown.stdout and "beta: edit calc.py" in shown.stdout
