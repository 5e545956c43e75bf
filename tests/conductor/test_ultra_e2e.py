"""Ultra mode end to end through the real CLI: three parallel steps on three workers and a merge step."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

from tests.conductor.kit import pool_for, step_requests, tc, text_of, write_plan
from tests.helpers import BUGGY, FIXED, fugu, make_repo, tool_reply

DELAY = 1.5  # long enough that the three first calls overlap even on a loaded machine


def test_parallel_steps_are_isolated_and_the_merge_sees_only_what_it_was_granted(
    tmp_path: Path, loopback_factory: object
) -> None:
    pool, servers = pool_for(tmp_path, loopback_factory, ["alpha", "beta", "gamma", "delta"])  # type: ignore[arg-type]
    repo = make_repo(tmp_path / "repo")
    (repo / "calc.py").write_text("# the user's uncommitted comment\n" + BUGGY)
    (repo / "wip.txt").write_text("user work in progress\n")
    servers["alpha"].script(
        "alpha",
        [
            {**tool_reply(tc("alpha_read", "read_file", path="calc.py")), "delay_s": DELAY},
            tool_reply(tc("alpha_edit", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "ALPHA-ANSWER: add() subtracted; fixed it in calc.py.",
        ],
    )
    servers["beta"].script(
        "beta",
        [
            {**tool_reply(tc("beta_run", "shell", command="python3 test_calc.py")), "delay_s": DELAY},
            "BETA-ANSWER: test_calc.py fails with an AssertionError.",
        ],
    )
    servers["gamma"].script(
        "gamma",
        [
            {
                **tool_reply(tc("gamma_write", "write_file", path="NOTES.md", content="gamma was here\n")),
                "delay_s": DELAY,
            },
            "GAMMA-ANSWER: wrote NOTES.md.",
        ],
    )
    servers["delta"].script(
        "delta",
        [
            tool_reply(tc("delta_run", "shell", command="python3 test_calc.py")),
            "DELTA-FINAL: merged the fix and the notes; test_calc.py passes.",
        ],
    )
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"worker": "alpha", "subtask": "Fix add() in calc.py.", "access": []},
            {"worker": "beta", "subtask": "Run the tests and report.", "access": []},
            {"worker": "gamma", "subtask": "Write NOTES.md.", "access": []},
            {"worker": "delta", "subtask": "Merge and verify.", "access": [0, 2]},
        ],
    )
    run = fugu(
        "-p",
        "fix the failing test",
        "--plan",
        str(plan),
        "--pool",
        str(pool),
        "--output-format",
        "stream-json",
        "--permission-mode",
        "full-auto",
        cwd=repo,
    )
    assert run.code == 0, run.stderr

    # the final step's tree (its own work plus what it was granted) landed; the user's work survived
    assert (repo / "calc.py").read_text() == "# the user's uncommitted comment\n" + FIXED
    assert (repo / "NOTES.md").read_text() == "gamma was here\n"
    assert (repo / "wip.txt").read_text() == "user work in progress\n"
    assert subprocess.run(["python3", "test_calc.py"], cwd=repo, capture_output=True).returncode == 0

    own = {
        "alpha": ["ALPHA-ANSWER", "alpha_read", "alpha_edit"],
        "beta": ["BETA-ANSWER", "beta_run"],
        "gamma": ["GAMMA-ANSWER", "gamma_write"],
        "delta": ["DELTA-FINAL", "delta_run"],
    }
    granted = {"alpha": set(), "beta": set(), "gamma": set(), "delta": {"ALPHA-ANSWER", "GAMMA-ANSWER"}}
    for name, server in servers.items():
        requests = step_requests(server, name)
        assert requests, name
        for r in requests:
            text = text_of(r)
            for other, markers in own.items():
                for marker in markers if other != name else ():
                    if marker in granted[name]:
                        assert marker in r.messages[1]["content"], (
                            name,
                            marker,
                        )  # granted: in its first message
                    else:
                        assert marker not in text, (name, marker)
    merge_first = step_requests(servers["delta"], "delta")[0]
    assert [m["role"] for m in merge_first.messages] == ["system", "user"]
    user = merge_first.messages[1]["content"]
    assert "ALPHA-ANSWER" in user and "GAMMA-ANSWER" in user and "BETA-ANSWER" not in user
    assert "-    return a - b" in user and "+gamma was here" in user  # the granted diffs
    assert "Run the tests and report." not in user  # beta's subtask is not granted either

    firsts = [step_requests(servers[n], n)[0] for n in ("alpha", "beta", "gamma")]
    assert max(r.arrived for r in firsts) < min(r.finished for r in firsts if r.finished)  # they overlapped

    events = run.events()
    wf = [e for e in events if e.get("subtype") == "workflow"]
    assert len(wf) == 1 and [(s["step"], s["worker"], s["access"]) for s in wf[0]["steps"]] == [
        (0, "alpha", []),
        (1, "beta", []),
        (2, "gamma", []),
        (3, "delta", [0, 2]),
    ]
    steps = [e for e in events if e.get("subtype") == "workflow_step"]
    finishes = {e["step"]: e for e in steps if e["event"] == "finish"}
    assert sorted(e["step"] for e in steps if e["event"] == "start") == [0, 1, 2, 3]
    assert all(finishes[i]["status"] == "success" and finishes[i]["cost_usd"] > 0 for i in range(4))
    tagged = {e["workflow_step"] for e in events if e.get("type") == "assistant"}
    assert tagged == {0, 1, 2, 3}
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"].startswith("DELTA-FINAL")
    assert {n: w["steps"] for n, w in result["workers"].items()} == {
        "alpha": 3,
        "beta": 2,
        "gamma": 2,
        "delta": 2,
    }
    assert abs(result["total_cost_usd"] - sum(f["cost_usd"] for f in finishes.values())) < 1e-6

    db = sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db")
    rows = db.execute("SELECT scope, agent, tool FROM tool_calls ORDER BY scope, rowid").fetchall()
    assert rows == [
        ("wf1.s0", "alpha", "read_file"),
        ("wf1.s0", "alpha", "edit_file"),
        ("wf1.s1", "beta", "shell"),
        ("wf1.s2", "gamma", "write_file"),
        ("wf1.s3", "delta", "shell"),
    ]
    beta_shell = db.execute("SELECT exit_code FROM tool_calls WHERE scope='wf1.s1'").fetchone()
    assert beta_shell == (1,)  # beta's worktree did not have alpha's fix: isolation of files too
    assert not list((Path(os.environ["FUGU_HOME"]) / "worktrees").rglob("*"))  # worktrees removed
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert len(worktrees.splitlines()) == 1
    memory = db.execute("SELECT kind, key FROM memory_facts ORDER BY kind, key").fetchall()
    assert ("edit", "calc.py") in memory and ("edit", "NOTES.md") in memory and ("read", "calc.py") in memory
    assert wf[0]["source"] == "plan-file"


def test_the_conductor_plans_with_one_repair_round_and_the_plan_runs(
    tmp_path: Path, loopback_factory: object
) -> None:
    pool, servers = pool_for(tmp_path, loopback_factory, ["alpha", "beta"])  # type: ignore[arg-type]
    repo = make_repo(tmp_path / "repo")
    bad = '{"steps": [{"worker": "zeta", "subtask": "fix it", "access": []}]}'
    good = {
        "steps": [
            {"worker": "beta", "subtask": "Find why test_calc.py fails.", "access": []},
            {"worker": "alpha", "subtask": "Fix calc.py using step 0's finding.", "access": [0]},
        ]
    }
    servers["alpha"].script(
        "alpha",
        [
            bad,
            "Here is the fixed workflow:\n```json\n" + json.dumps(good) + "\n```",
            tool_reply(tc("a_edit", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "ALPHA-DONE: add() adds now.",
        ],
    )
    servers["beta"].script(
        "beta",
        [
            tool_reply(tc("b_read", "read_file", path="calc.py")),
            "BETA-FOUND: add() returns a - b.",
        ],
    )
    run = fugu(
        "--ultra",
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

    conductor = [
        r
        for r in servers["alpha"].requests_for("alpha")
        if "You are the conductor" in json.dumps(r.messages[:1])
    ]
    assert len(conductor) == 2
    system = conductor[0].messages[0]["content"]
    assert "- alpha: worker alpha" in system and "- beta: worker beta" in system
    assert "fix the failing test" in conductor[0].messages[1]["content"]
    assert "unknown worker 'zeta'" in conductor[1].messages[-1]["content"]  # the repair round names the error
    assert not any("tools" in r.body for r in conductor)  # the conductor plans; it calls no tool

    alpha_step = step_requests(servers["alpha"], "alpha")[0].messages[1]["content"]
    assert "BETA-FOUND" in alpha_step and "Fix calc.py using step 0's finding." in alpha_step
    assert "b_read" not in json.dumps(step_requests(servers["alpha"], "alpha")[-1].messages)

    events = run.events()
    wf = next(e for e in events if e.get("subtype") == "workflow")
    assert wf["source"] == "conductor" and [s["worker"] for s in wf["steps"]] == ["beta", "alpha"]
    result = events[-1]
    assert result["subtype"] == "success" and result["result"] == "ALPHA-DONE: add() adds now."
    assert {n: w["steps"] for n, w in result["workers"].items()} == {
        "alpha": 4,
        "beta": 2,
    }  # 2 of alpha's plan
