"""`fugu eval` through the real CLI: workers measured on a suite (here or on a Ray instance the CLI starts),
rewards stored for router training; the humaneval suite; Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from fugu_cli.eval import humaneval
from tests.eval.kit import Responder, write_responder_pool, write_suite
from tests.helpers import call, fugu, tool_reply, write_pool
from tests.loopback import LoopbackServer

SUITE = """
name = "tiny"
[[tasks]]
id = "add"
prompt = "Fix add() in calc.py so that python3 test_calc.py passes."
check = "python3 test_calc.py"
protected = ["test_calc.py"]
[tasks.files]
"calc.py" = "def add(a, b):\\n    return a - b\\n"
"test_calc.py" = "from calc import add\\nassert add(2, 3) == 5\\n"
"""


def test_eval_scores_each_worker_by_the_check_and_stores_outcomes(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    suite = tmp_path / "tiny"
    suite.mkdir()
    (suite / "suite.toml").write_text(SUITE)
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": n,
                "model": f"openai/{n}",
                "api_base": loopback.base_url,
                "price_in": 1.0,
                "price_out": 1.0,
            }
            for n in ("fixer", "talker")
        ],
    )
    loopback.script(
        "fixer",
        [tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")), "fixed"],
    )
    loopback.script("talker", ["It looks fine to me."])
    run = fugu(
        "eval",
        str(suite),
        "--worker",
        "fixer",
        "--worker",
        "talker",
        "--pool",
        str(pool),
        "--json",
        cwd=tmp_path,
    )
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    text = json.dumps(report)
    assert "fixer" in text and "talker" in text
    db = sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db")
    rows = dict(db.execute("SELECT worker, reward FROM outcomes").fetchall())
    assert rows == {"fixer": 1.0, "talker": 0.0}
    assert fugu("eval", "no-such-suite", cwd=tmp_path).code == 2


def test_humaneval_through_the_cli_keeps_the_hidden_test_from_the_worker(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    problem = humaneval.problems()[0]
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": loopback.base_url}]
    )
    solution = problem["prompt"] + problem["canonical_solution"]
    loopback.script("w", [tool_reply(call("write_file", path="solution.py", content=solution)), "done"])
    run = fugu(
        "eval",
        "humaneval",
        "--task",
        "HumanEval-0",
        "--worker",
        "w",
        "--pool",
        str(pool),
        "--json",
        cwd=tmp_path,
    )
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["tasks"] == ["HumanEval-0"] and report["cells"] == {"HumanEval-0": {"w": 1.0}}
    sent = json.dumps([r.body for r in loopback.requests_for("w")])
    assert len(loopback.requests_for("w")) == 2 and "def check(candidate)" not in sent
    assert "has_close_elements" in sent  # the problem itself is in the prompt


def test_eval_on_ray_from_the_config_and_ctrl_c_stops_a_local_run(tmp_path: Path) -> None:
    """`[executor] kind = "ray"` in the user's config: the CLI starts a local Ray instance, runs the jobs in
    its workers and stores what they ship back. Then a local run, held mid-turn, is stopped by Ctrl-C."""
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text('[executor]\nkind = "ray"\nnum_cpus = 2\n')
    ray_tmp = Path(tempfile.mkdtemp(prefix="fugu-ray-cli-", dir="/tmp"))
    with Responder() as server:
        pool = write_responder_pool(tmp_path / "pool.toml", server)
        suite = write_suite(tmp_path / "mini")
        env = {"RAY_TMPDIR": str(ray_tmp)}
        # Ray's own processes (GCS, raylet, two workers importing fugu) take 20 s on a quiet machine and
        # over 120 s beside the rest of the suite on 2 cores (CI, stop 32): the bound is for a hang only
        run = fugu(
            "eval", str(suite), "--worker", "fixer", "--pool", str(pool), cwd=tmp_path, env=env, timeout=420
        )
    shutil.rmtree(ray_tmp, ignore_errors=True)
    assert run.code == 0, run.stderr
    assert "✓ add / fixer #1" in run.stderr and "✓ first-n / fixer #1" in run.stderr
    db = sqlite3.connect(home / "fugu.db")
    assert sorted(db.execute("SELECT worker, reward FROM outcomes").fetchall()) == [("fixer", 1.0)] * 2
    assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (2,)
    assert "/fugu-eval-job-" in db.execute("SELECT cwd FROM sessions").fetchone()[0]  # made on the node

    # a local run now; the held turns outlast the client's wait for a first byte (30 s), after which a job
    # would fail over and finish, on a loaded machine before the second job's turn began
    (home / "config.toml").write_text("[llm]\nfirst_byte_timeout_s = 600\ntimeout_s = 600\n")
    with Responder(hold=("calc.py", "seq.py"), hold_s=300) as server:
        pool = write_responder_pool(tmp_path / "pool.toml", server)
        proc = subprocess.Popen(
            [sys.executable, "-m", "fugu_cli", "eval", str(suite), "--worker", "fixer", "--pool", str(pool)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        server.wait_for("calc.py", 1)
        server.wait_for("seq.py", 1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # long before the held replies would come
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert db.execute("SELECT COUNT(*) FROM outcomes").fetchone() == (2,)  # nothing added by the stopped run
