"""The live environment: a conductor's workflow runs through fugu's ultra runner on a suite task, in a fresh
repo, and the suite's check decides; an unparseable one runs nothing. Only the LLM's words are scripted."""

from __future__ import annotations

import json
from pathlib import Path

from fugu_cli.app import resolve
from fugu_cli.conductor.replay import Rules
from fugu_cli.conductor.tasks import Item
from fugu_cli.eval import load_suite
from fugu_cli.eval.conductor_env import LiveEnvironment, suite_matrix
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.options import RunOptions
from fugu_cli.store import Store
from tests.helpers import FIXED
from tests.test_eval import add_task, fix, scripted_pool, write_suite


def plan(worker: str) -> str:
    return json.dumps({"steps": [{"worker": worker, "subtask": "Fix add() in calc.py.", "access": []}]})


def test_the_suites_check_decides_and_an_invalid_plan_runs_nothing(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "s", [add_task()]))
    resolved = resolve(RunOptions(cwd=tmp_path, pool=str(scripted_pool(tmp_path, "good", "bad"))))
    llm = ScriptedLLM({"good": fix("calc.py", FIXED), "bad": ["I looked; nothing to change."]})
    store = Store(tmp_path / "fugu.db")
    env = LiveEnvironment(suite, resolved, Rules(max_depth=0), store, llm)
    data = suite_matrix(suite, resolved)
    assert data.texts == (suite.tasks[0].prompt,) and data.workers == ("good", "bad")
    item = Item(0, suite.tasks[0].prompt, ("good", "bad"))

    invalid = env.outcome(item, "I would rather not plan.")
    assert not invalid.valid and invalid.reward(0.0) == 0.0 and llm.calls == []

    right = env.outcome(item, plan("good"))
    assert right.valid and right.right and right.reward(0.0) == 1.0 and right.final_worker == "good"
    wrong = env.outcome(item, plan("bad"))
    assert wrong.valid and not wrong.right and wrong.reward(0.0) == 0.5
    rows = store.query("SELECT worker, reward FROM outcomes ORDER BY rowid")
    assert [tuple(r) for r in rows] == [("ultra", 1.0), ("ultra", 0.0)]  # stored like any fugu eval run
