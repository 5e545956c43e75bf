"""`fugu eval`: suites run per arm in fresh git repos, scored by their checks, stored as outcomes that the
router's data loader reads back. Only the LLM's words are scripted (ScriptedLLM or loopback HTTP)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.app import RunOptions
from fugu_cli.errors import UsageError
from fugu_cli.eval import EvalOptions, load_suite, main, plan_arms, run_suite
from fugu_cli.eval.report import format_text
from fugu_cli.eval.suite import make_task_repo, restore_protected, run_check
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.router.data import load_store_outcomes
from fugu_cli.store import Store
from fugu_cli.types import Worker
from tests.helpers import BUGGY, FIXED, TEST, call, git, tool_reply, write_pool
from tests.loopback import LoopbackServer

SEQ_BUGGY = "def first_n(n):\n    return list(range(1, n))\n"
SEQ_FIXED = "def first_n(n):\n    return list(range(1, n + 1))\n"
SEQ_TEST = "from seq import first_n\n\nassert first_n(3) == [1, 2, 3], first_n(3)\nprint('ok')\n"
ADD_PROMPT = "Fix calc.py so that python3 test_calc.py passes."
SEQ_PROMPT = "Fix seq.py so that python3 test_seq.py passes."


def _toml_str(text: str) -> str:
    return json.dumps(text)


def write_suite(root: Path, tasks: list[dict[str, Any]], header: str = 'name = "mini"\n') -> Path:
    """A suite folder; each task dict has id, prompt, check, files and optional extra keys."""
    root.mkdir(parents=True, exist_ok=True)
    out = [header]
    for t in tasks:
        out.append("[[tasks]]")
        for key in ("id", "prompt", "check"):
            out.append(f"{key} = {_toml_str(t[key])}")
        for key, value in t.items():
            if key not in ("id", "prompt", "check", "files"):
                out.append(f"{key} = {json.dumps(value)}")
        out.append("[tasks.files]")
        out += [f"{_toml_str(p)} = {_toml_str(c)}" for p, c in t["files"].items()]
        out.append("")
    (root / "suite.toml").write_text("\n".join(out))
    return root


def add_task(**extra: Any) -> dict[str, Any]:
    files = {"calc.py": BUGGY, "test_calc.py": TEST}
    return {"id": "add", "prompt": ADD_PROMPT, "check": "python3 test_calc.py", "files": files, **extra}


def seq_task() -> dict[str, Any]:
    files = {"seq.py": SEQ_BUGGY, "test_seq.py": SEQ_TEST}
    return {"id": "first-n", "prompt": SEQ_PROMPT, "check": "python3 test_seq.py", "files": files}


def scripted_pool(tmp_path: Path, *names: str) -> Path:
    """Workers with no api_base (the ScriptedLLM answers); the first has the highest priority and price."""
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "priority": len(names) - i,
            "price_in": 10.0 / (i + 1),
            "price_out": 10.0 / (i + 1),
        }
        for i, n in enumerate(names)
    ]
    return write_pool(tmp_path / "pool.toml", workers)


def fix(path: str, content: str) -> list[Any]:
    return [tool_reply(call("write_file", path=path, content=content)), "fixed"]


def test_two_workers_rewards_outcomes_and_reward_matrix(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "mini", [add_task(), seq_task()]))
    pool = scripted_pool(tmp_path, "good", "bad")
    # parallel=1 runs jobs in order (task, then arm: good, bad, fugu), so each worker's queue lines up;
    # the prior router sends the fugu arm to `good` (higher priority)
    llm = ScriptedLLM(
        {
            "good": [
                *fix("calc.py", FIXED),
                *fix("calc.py", FIXED),
                "I cannot fix seq.py",
                "I cannot either",
            ],
            "bad": ["no idea", *fix("seq.py", SEQ_FIXED)],
        }
    )
    store = Store(tmp_path / "home" / "fugu.db")
    seen: list[str] = []
    report = run_suite(
        suite,
        RunOptions(cwd=tmp_path, pool=str(pool)),
        workers=["good", "bad"],
        modes=["fugu"],
        parallel=1,
        llm=llm,
        store=store,
        on_result=lambda r: seen.append(f"{r.task}/{r.arm}={r.reward:g}"),
    )
    assert seen == [
        "add/good=1",
        "add/bad=0",
        "add/fugu=1",
        "first-n/good=0",
        "first-n/bad=1",
        "first-n/fugu=0",
    ]
    assert report.cells == {
        "add": {"good": 1.0, "bad": 0.0, "fugu": 1.0},
        "first-n": {"good": 0.0, "bad": 1.0, "fugu": 0.0},
    }
    good, bad, fugu = report.summaries
    assert (good.solved, good.runs, good.mean_reward) == (1, 2, 0.5)
    assert (bad.solved, fugu.solved) == (1, 1)
    assert good.mean_cost_usd is not None and bad.mean_cost_usd is not None
    assert good.mean_cost_usd > bad.mean_cost_usd > 0
    assert report.best_worker == "bad"  # tied on reward, cheaper
    assert report.oracle.mean_reward == 1.0 and report.oracle.solved_tasks == 2
    (cmp,) = report.comparisons
    assert cmp.arm == "fugu" and cmp.best_worker == "bad" and cmp.reward_delta == 0.0
    assert cmp.cost_ratio is not None and cmp.cost_ratio > 1.0
    assert llm.pending("good") == 0 and llm.pending("bad") == 0
    text = format_text(report)
    assert "best single worker: bad (reward 0.50)" in text and "fugu vs bad: reward +0.00" in text
    assert "oracle: reward 1.00, 2/2 tasks solved" in text

    rows = store.query("SELECT task, worker, reward, cost_usd, source, session_id FROM outcomes")
    assert len(rows) == 6 and {r["source"] for r in rows} == {"eval:mini"}
    stored = {(r["task"], r["worker"]): r["reward"] for r in rows}
    assert stored[(ADD_PROMPT, "good")] == 1.0 and stored[(SEQ_PROMPT, "good")] == 0.0
    assert stored[(SEQ_PROMPT, "bad")] == 1.0 and stored[(ADD_PROMPT, "fugu")] == 1.0
    sessions = {r["id"] for r in store.query("SELECT id FROM sessions")}
    assert {r["session_id"] for r in rows} <= sessions and len({r["session_id"] for r in rows}) == 6
    fugu_sid = next(r["session_id"] for r in rows if r["worker"] == "fugu" and r["task"] == ADD_PROMPT)
    routed = store.query("SELECT worker FROM steps WHERE session_id=?", (fugu_sid,))
    assert {r["worker"] for r in routed} == {"good"}

    matrix = load_store_outcomes(store.path)
    assert matrix.workers == ("bad", "good")  # the fugu arm is a mode, not a worker a router can pick
    assert matrix.texts is not None and set(matrix.texts) == {ADD_PROMPT, SEQ_PROMPT}
    row = {
        text: dict(zip(matrix.workers, matrix.reward[i], strict=True)) for i, text in enumerate(matrix.texts)
    }
    assert row[ADD_PROMPT] == {"bad": 0.0, "good": 1.0}
    assert row[SEQ_PROMPT] == {"bad": 1.0, "good": 0.0}
    assert matrix.cost is not None
    costs = {(r["task"], r["worker"]): r["cost_usd"] for r in rows}
    for i, text in enumerate(matrix.texts):
        for j, worker in enumerate(matrix.workers):
            assert matrix.cost[i, j] == pytest.approx(costs[(text, worker)]) and matrix.cost[i, j] > 0


def test_the_ultra_arm_runs_the_workflow_and_its_landed_change_is_scored(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "s", [add_task()]))
    pool = scripted_pool(tmp_path, "good", "bad")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"steps": [{"worker": "bad", "subtask": "Fix add() in calc.py.", "access": []}]})
    )
    llm = ScriptedLLM({"bad": fix("calc.py", FIXED)})
    store = Store(tmp_path / "fugu.db")
    opts = RunOptions(cwd=tmp_path, pool=str(pool), plan=plan)
    report = run_suite(suite, opts, workers=[], modes=["ultra"], llm=llm, store=store)
    assert report.cells == {"add": {"ultra": 1.0}} and report.best_worker is None
    (cmp,) = report.comparisons
    assert cmp.arm == "ultra" and cmp.reward_delta is None
    assert llm.workers_called() == ["bad", "bad"]
    (row,) = store.query(
        "SELECT s.mode, o.worker, o.reward FROM outcomes o JOIN sessions s ON s.id = o.session_id"
    )
    assert tuple(row) == ("ultra", "ultra", 1.0)


def test_repeats_are_averaged_and_a_protected_test_cannot_be_edited_to_pass(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "s", [add_task(protected=["test_calc.py"])]))
    pool = scripted_pool(tmp_path, "cheat", "good")
    llm = ScriptedLLM(
        {
            "cheat": [*fix("test_calc.py", "print('ok')\n")] * 2,
            "good": ["not this time", *fix("calc.py", FIXED)],
        }
    )
    store = Store(tmp_path / "fugu.db")
    report = run_suite(
        suite,
        RunOptions(cwd=tmp_path, pool=str(pool)),
        workers=["cheat", "good"],
        repeats=2,
        parallel=1,
        llm=llm,
        store=store,
    )
    assert report.repeats == 2
    assert report.cells["add"] == {"cheat": 0.0, "good": 0.5}
    cheat = [r for r in report.records if r.arm == "cheat"]
    assert all("should be 5" in r.check_output for r in cheat)
    matrix = load_store_outcomes(store.path)
    assert matrix.workers == ("cheat", "good") and matrix.reward.tolist() == [[0.0, 0.5]]


def test_check_timeout_kills_the_whole_check(tmp_path: Path) -> None:
    slow = add_task(check="(sleep 30; echo late) & sleep 30", check_timeout_s=0.5)
    suite = load_suite(write_suite(tmp_path / "s", [slow]))
    pool = scripted_pool(tmp_path, "solo")
    store = Store(tmp_path / "fugu.db")
    started = time.monotonic()
    report = run_suite(
        suite,
        RunOptions(cwd=tmp_path, pool=str(pool)),
        workers=["solo"],
        llm=ScriptedLLM(["done"]),
        store=store,
    )
    assert time.monotonic() - started < 10
    (record,) = report.records
    assert record.check_timed_out and record.check_exit is None and record.reward == 0.0
    assert "timed out after 0.5 s" in record.check_output and "late" not in record.check_output
    assert [tuple(r) for r in store.query("SELECT worker, reward FROM outcomes")] == [("solo", 0.0)]


def test_a_turn_past_the_suite_timeout_is_cancelled_and_still_scored(tmp_path: Path) -> None:
    header = 'name = "mini"\nturn_timeout_s = 0.5\n'
    suite = load_suite(write_suite(tmp_path / "s", [add_task()], header=header))
    pool = scripted_pool(tmp_path, "slow")
    llm = ScriptedLLM({"slow": [{"content": "thinking", "delay_s": 30}]})
    store = Store(tmp_path / "fugu.db")
    started = time.monotonic()
    report = run_suite(
        suite, RunOptions(cwd=tmp_path, pool=str(pool)), workers=["slow"], llm=llm, store=store
    )
    assert time.monotonic() - started < 10
    (record,) = report.records
    assert record.status == "interrupted" and record.reward == 0.0 and record.stored
    assert record.error is not None and "turn_timeout_s (0.5 s)" in record.error
    assert [tuple(r) for r in store.query("SELECT worker, reward FROM outcomes")] == [("slow", 0.0)]


def test_arms_run_in_parallel_threads(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "s", [add_task()]))
    pool = scripted_pool(tmp_path, "a", "b")
    llm = ScriptedLLM({"a": [{"content": "done", "delay_s": 2}], "b": [{"content": "done", "delay_s": 2}]})
    store = Store(tmp_path / "fugu.db")
    run_suite(
        suite, RunOptions(cwd=tmp_path, pool=str(pool)), workers=["a", "b"], parallel=2, llm=llm, store=store
    )
    steps = store.query("SELECT worker, started_at, finished_at FROM steps ORDER BY worker")
    (a, b) = [(r["started_at"], r["finished_at"]) for r in steps]
    assert a[0] < b[1] and b[0] < a[1], "the two arms' steps should overlap in time"


def test_a_task_from_a_repo_folder_gets_its_files_and_protected_ones_back(tmp_path: Path) -> None:
    root = tmp_path / "s"
    (root / "repos" / "calc" / "pkg").mkdir(parents=True)
    (root / "repos" / "calc" / "pkg" / "calc.py").write_text(BUGGY)
    (root / "repos" / "calc" / "test_calc.py").write_text(TEST.replace("from calc", "from pkg.calc"))
    (root / "suite.toml").write_text(
        '[[tasks]]\nid = "calc"\nprompt = "fix pkg/calc.py"\ncheck = "python3 test_calc.py"\n'
        'repo = "repos/calc"\nprotected = ["test_calc.py"]\n[tasks.files]\n"NOTES.md" = "read me"\n'
    )
    (task,) = load_suite(root).tasks
    repo = make_task_repo(task, tmp_path / "run")
    assert (repo / "pkg" / "calc.py").read_text() == BUGGY and (repo / "NOTES.md").read_text() == "read me"
    assert git(repo, "status", "--porcelain") == "" and "eval task calc" in git(repo, "log", "--oneline")
    (repo / "pkg" / "calc.py").write_text(FIXED)
    (repo / "test_calc.py").write_text("raise SystemExit(1)\n")
    restore_protected(task, repo)
    assert run_check(task, repo).passed


def test_run_check_passes_on_exit_zero_and_keeps_the_output(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "s", [add_task()]))
    task = suite.tasks[0]
    repo = make_task_repo(task, tmp_path / "repo")
    failed = run_check(task, repo)
    assert not failed.passed and failed.exit_code == 1 and "should be 5" in failed.output
    (repo / "calc.py").write_text(FIXED)
    passed = run_check(task, repo)
    assert passed.passed and passed.exit_code == 0 and passed.output.strip() == "ok"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('name = "x"\n', "a suite needs [[tasks]]"),
        ('[[tasks]]\nid = "a"\nprompt = "p"\n[tasks.files]\n"a.py" = ""\n', "task 1 ('a'), field check"),
        ('[[tasks]]\nid = "a"\nprompt = "p"\ncheck = "true"\n', "give the task's files"),
        (
            '[[tasks]]\nid = "a"\nprompt = "p"\ncheck = "c"\n[tasks.files]\n"../x.py" = ""\n',
            "inside the task",
        ),
        (
            '[[tasks]]\nid = "a"\nprompt = "p"\ncheck = "c"\nrepo = "nope"\n',
            "repo folder 'nope' does not exist",
        ),
        ('[[tasks]]\nid = "a"\nprompt = "p"\ncheck = "c"\nfile = {}\n', "field file: Extra inputs"),
        ('[[tasks]]\nid = "a b"\nprompt = "p"\ncheck = "c"\nrepo = "."\n', "field id: String should match"),
        ("[[tasks]\n", "cannot read"),
        (
            '[[tasks]]\nid = "a"\nprompt = "p"\ncheck = "c"\nrepo = "."\n'
            '[[tasks]]\nid = "a"\nprompt = "q"\ncheck = "c"\nrepo = "."\n',
            "two tasks have the same id: 'a'",
        ),
    ],
)
def test_a_bad_suite_is_a_clear_usage_error(tmp_path: Path, toml: str, message: str) -> None:
    (tmp_path / "suite.toml").write_text(toml)
    with pytest.raises(UsageError) as err:
        load_suite(tmp_path)
    assert message in str(err.value) and str(tmp_path / "suite.toml") in str(err.value)


def test_main_exits_2_with_one_line_for_a_bad_suite_or_worker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(EvalOptions(suite=str(tmp_path / "missing"), run=RunOptions(cwd=tmp_path))) == 2
    missing = capsys.readouterr().err
    assert "no suite" in missing and "pyfix" in missing
    suite = write_suite(tmp_path / "s", [add_task()])
    pool = scripted_pool(tmp_path, "solo")
    run = RunOptions(cwd=tmp_path, pool=str(pool))
    assert main(EvalOptions(suite=str(suite), workers=["ghost"], run=run)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--worker ghost" in err[0] and "solo" in err[0]


def test_plan_arms_defaults_to_every_worker_and_fugu() -> None:
    pool = [Worker("a", "openai/a"), Worker("b", "openai/b")]
    assert [a.name for a in plan_arms(pool, None, [])] == ["a", "b", "fugu"]
    assert [(a.name, a.ultra) for a in plan_arms(pool, [], ["ultra"])] == [("ultra", True)]
    with pytest.raises(UsageError, match="choose fugu or ultra"):
        plan_arms(pool, None, ["turbo"])
    with pytest.raises(UsageError, match="like a mode arm"):
        plan_arms([Worker("fugu", "openai/x")], None, [])


def test_the_shipped_suite_loads_by_name_and_no_task_starts_solved(tmp_path: Path) -> None:
    suite = load_suite("pyfix")
    assert suite.name == "pyfix" and len(suite.tasks) == 5
    for task in suite.tasks:
        repo = make_task_repo(task, tmp_path / task.id)
        assert not run_check(task, repo).passed, task.id
        assert task.protected and all((repo / p).is_file() for p in task.protected)


def test_eval_over_loopback_http_prints_one_json_report(
    tmp_path: Path, loopback: LoopbackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = write_suite(tmp_path / "s", [add_task()])
    workers = [
        {"name": n, "model": f"openai/{n}", "api_base": loopback.base_url, "price_in": 1.0, "price_out": 2.0}
        for n in ("alpha", "beta")
    ]
    pool = write_pool(tmp_path / "pool.toml", workers)
    loopback.script("alpha", fix("calc.py", FIXED))
    loopback.script("beta", ["I give up."])
    code = main(
        EvalOptions(
            suite=str(suite),
            workers=["alpha", "beta"],
            run=RunOptions(cwd=tmp_path, pool=str(pool)),
            json_out=True,
        )
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    assert report["cells"] == {"add": {"alpha": 1.0, "beta": 0.0}}
    assert report["best_worker"] == "alpha" and report["oracle"]["mean_reward"] == 1.0
    alpha = next(s for s in report["summaries"] if s["arm"] == "alpha")
    assert alpha["solved"] == 1 and alpha["mean_cost_usd"] > 0
    assert len(loopback.requests_for("alpha")) == 2 and len(loopback.requests_for("beta")) == 1
    assert "✓ add / alpha #1" in out.err and "✗ add / beta #1" in out.err
    db = Path(os.environ["FUGU_HOME"]) / "fugu.db"
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT worker, reward, source FROM outcomes ORDER BY worker").fetchall()
    assert rows == [("alpha", 1.0, "eval:mini"), ("beta", 0.0, "eval:mini")]
