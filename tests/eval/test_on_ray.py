"""`fugu eval` on a real local Ray instance (2 CPUs): the jobs run in Ray worker processes against loopback
workers over HTTP, and what lands in the user's store is what the local executor stores; a job whose worker
is killed mid-turn is run again with nothing lost or doubled; stopping cancels the cluster's tasks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fugu_cli.app import RunOptions
from fugu_cli.errors import Interrupted
from fugu_cli.eval import load_suite, run_suite
from fugu_cli.eval.report import RunRecord
from fugu_cli.store import SESSION_TABLES, Store
from tests.eval.kit import Responder, ledger, write_responder_pool, write_suite
from tests.ray_kit import RayInstance

TASK_NAME = "fugu:run_on_node"


def _wait_out_held_replies() -> None:
    """A worker that sends no first byte for `[llm] first_byte_timeout_s` (30 s) fails over, and the job goes
    on to finish: a turn held for a test (to kill or cancel it mid-turn) must outlast that, or on a loaded
    machine the first job can finish while the second is still starting. The user's config (read by the
    driver, whose Resolved the nodes get) lets the client wait longer than any held reply here."""
    config = Path(os.environ["FUGU_HOME"]) / "config.toml"
    config.write_text("[llm]\nfirst_byte_timeout_s = 600\ntimeout_s = 600\n")


def _by_job(records: tuple[RunRecord, ...]) -> dict[tuple[str, str, int], str]:
    out = {}
    for r in records:
        assert r.session_id is not None, r
        out[(r.task, r.arm, r.repeat)] = r.session_id
    return out


def _counts(store: Store) -> dict[str, int]:
    return {t: int(store.query(f"SELECT COUNT(*) AS n FROM {t}")[0]["n"]) for t in SESSION_TABLES}


def test_ray_stores_the_same_outcomes_and_ledger_as_the_local_executor(
    tmp_path: Path, ray_instance: RayInstance
) -> None:
    with Responder() as server:
        suite = load_suite(write_suite(tmp_path / "mini"))
        opts = RunOptions(cwd=tmp_path, pool=str(write_responder_pool(tmp_path / "pool.toml", server)))
        here, there = Store(tmp_path / "here.db"), Store(tmp_path / "there.db")
        common = {"workers": ["fixer", "talker"], "modes": ["fugu"], "repeats": 2}
        local = run_suite(suite, opts, store=here, parallel=2, **common)  # type: ignore[arg-type]
        on_ray = run_suite(suite, opts, store=there, executor="ray", **common)  # type: ignore[arg-type]

    assert [r.reward for r in local.records] == [1.0, 0.0, 1.0] * 4  # fixer, talker, fugu (routed to fixer)
    assert [(r.task, r.arm, r.repeat, r.reward, r.cost_usd, r.stored) for r in on_ray.records] == [
        (r.task, r.arm, r.repeat, r.reward, r.cost_usd, r.stored) for r in local.records
    ]
    outcome = "SELECT task, worker, reward, cost_usd, source FROM outcomes ORDER BY task, worker, rowid"
    assert [tuple(r) for r in there.query(outcome)] == [tuple(r) for r in here.query(outcome)]
    assert _counts(there) == _counts(here)
    assert _counts(here)["tool_calls"] == 8 and _counts(here)["sessions"] == 12
    mine, theirs = _by_job(local.records), _by_job(on_ray.records)
    for job, sid in mine.items():
        assert ledger(there, theirs[job]) == ledger(here, sid), job
    assert set(theirs.values()).isdisjoint(mine.values())  # sessions made on the nodes, under their own ids


def test_a_job_whose_worker_is_killed_mid_turn_runs_again_and_is_stored_once(
    tmp_path: Path, ray_instance: RayInstance
) -> None:
    _wait_out_held_replies()
    with Responder(hold=("seq.py",)) as server:
        suite = load_suite(write_suite(tmp_path / "mini"))
        opts = RunOptions(cwd=tmp_path, pool=str(write_responder_pool(tmp_path / "pool.toml", server)))
        store = Store(tmp_path / "fugu.db")
        out: dict[str, object] = {}

        def run() -> None:
            try:
                out["report"] = run_suite(suite, opts, workers=["fixer"], store=store, executor="ray")
            except BaseException as e:
                out["error"] = e

        runner = threading.Thread(target=run)
        runner.start()
        server.wait_for("seq.py", 1)  # the first attempt is in its turn, its reply held
        server.wait_for("calc.py", 1)
        doomed = _the_worker_holding(ray_instance, tmp_path, store)
        os.kill(doomed, signal.SIGKILL)
        server.wait_for("seq.py", 2)  # Ray ran the job again, in another worker
        runner.join(120)
        assert not runner.is_alive()

    assert "error" not in out, out.get("error")
    report = out["report"]
    records = report.records  # type: ignore[attr-defined]
    assert [(r.task, r.reward, r.stored) for r in records] == [("add", 1.0, True), ("first-n", 1.0, True)]
    counts = _counts(store)
    assert counts["sessions"] == 2 and counts["outcomes"] == 2 and counts["tool_calls"] == 2
    sids = {r["session_id"] for r in store.query("SELECT session_id FROM outcomes")}
    assert sids == {r.session_id for r in records}


def _the_worker_holding(ray: RayInstance, tmp_path: Path, store: Store) -> int:
    """The one Ray worker still in a job once the other job's outcome is in the store."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _counts(store)["outcomes"] == 1:
            pids = ray.task_pids(TASK_NAME)
            if len(pids) == 1:
                return pids[0]
        time.sleep(0.1)
    raise AssertionError(f"expected one running job, found {ray.task_pids(TASK_NAME)}")


def test_stopping_cancels_the_clusters_tasks(tmp_path: Path, ray_instance: RayInstance) -> None:
    _wait_out_held_replies()
    with Responder(hold=("calc.py", "seq.py"), hold_s=300) as server:
        suite = load_suite(write_suite(tmp_path / "mini"))
        opts = RunOptions(cwd=tmp_path, pool=str(write_responder_pool(tmp_path / "pool.toml", server)))
        store = Store(tmp_path / "fugu.db")
        stop = threading.Event()
        out: dict[str, BaseException] = {}

        def run() -> None:
            try:
                run_suite(suite, opts, workers=["fixer"], store=store, executor="ray", stop=stop)
            except BaseException as e:
                out["error"] = e

        runner = threading.Thread(target=run)
        runner.start()
        server.wait_for("calc.py", 1)
        server.wait_for("seq.py", 1)
        assert len(ray_instance.task_pids(TASK_NAME)) == 2  # both jobs are in their held turns
        stop.set()
        runner.join(60)  # far less than the 300 s the turns are held
        assert not runner.is_alive()
        assert isinstance(out.get("error"), Interrupted)
        deadline = time.monotonic() + 60
        while ray_instance.task_pids(TASK_NAME) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert (
            ray_instance.task_pids(TASK_NAME) == []
        )  # the cluster's processes were stopped, not left to run
        assert _counts(store)["outcomes"] == 0


def test_ctrl_c_in_the_cli_cancels_the_clusters_tasks_and_exits_130(
    tmp_path: Path, ray_instance: RayInstance
) -> None:
    """`fugu eval --executor ray --ray-address ADDR` joins the running instance; SIGINT while both jobs are
    held mid-turn on it ends the run at once, with nothing stored."""
    _wait_out_held_replies()
    with Responder(hold=("calc.py", "seq.py"), hold_s=300) as server:
        suite = write_suite(tmp_path / "mini")
        pool = write_responder_pool(tmp_path / "pool.toml", server)
        argv = ["eval", str(suite), "--worker", "fixer", "--pool", str(pool), "--executor", "ray"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "fugu_cli", *argv, "--ray-address", ray_instance.address],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        server.wait_for("calc.py", 1)
        server.wait_for("seq.py", 1)
        assert len(ray_instance.task_pids(TASK_NAME)) == 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # long before the held replies would come
    assert proc.returncode == 130, err
    assert "interrupted: 0 of 2 runs finished and stored" in err
    assert _counts(Store(Path(os.environ["FUGU_HOME"]) / "fugu.db"))["outcomes"] == 0


def test_keep_is_refused_with_ray(tmp_path: Path) -> None:
    with Responder() as server:
        suite = load_suite(write_suite(tmp_path / "mini"))
        opts = RunOptions(cwd=tmp_path, pool=str(write_responder_pool(tmp_path / "pool.toml", server)))
        with pytest.raises(Exception, match="--keep"):
            run_suite(suite, opts, workers=["fixer"], executor="ray", keep=True)
