"""`fugu eval` through the real CLI: workers measured on a suite, rewards stored for router training."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

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
