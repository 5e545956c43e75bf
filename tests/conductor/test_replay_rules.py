"""The rules that turn a workflow into an outcome under replay (conductor/replay.py), one by one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from fugu_cli.conductor.env import ReplayEnvironment
from fugu_cli.conductor.replay import Rules, score_text
from fugu_cli.conductor.tasks import Item
from fugu_cli.router.data import RewardMatrix

WORKERS = ("ant", "bee", "cat")


def matrix(reward: Sequence[Sequence[float]], cost: tuple[float, ...] = (0.01, 0.1, 1.0)) -> RewardMatrix:
    r = np.array(reward, dtype=float)
    n = len(r)
    return RewardMatrix(
        name="rules",
        prompt_ids=tuple(f"p{i}" for i in range(n)),
        texts=tuple(f"task {i}" for i in range(n)),
        tasks=("t",) * n,
        splits=("",) * n,
        workers=WORKERS,
        reward=r,
        cost=np.tile(np.array(cost, dtype=float), (n, 1)),
    )


def plan(*steps: tuple[str, list[int]]) -> str:
    return json.dumps({"steps": [{"worker": w, "subtask": "do it", "access": a} for w, a in steps]})


def run(data: RewardMatrix, text: str, rules: Rules | None = None, task: int = 0, **kw: Any) -> Any:
    env = ReplayEnvironment(data, rules or Rules(), seed=kw.pop("seed", 0))
    return env.outcome(Item(task, data.texts[task], kw.pop("shown", WORKERS)), text, kw.pop("replan", None))  # type: ignore[index]


ONLY_CAT = [[0, 0, 1]]


def test_an_unparseable_or_invalid_workflow_earns_nothing_and_runs_nothing() -> None:
    for text in ("no json here", plan(("zebra", [])), plan(("ant", [0]))):
        out = run(matrix(ONLY_CAT), text)
        assert not out.valid and out.reward(0.0) == 0.0 and out.cost == 0.0 and out.workers == ()
    # a worker the task was not shown is invalid too: each task plans with the subset it is shown
    out = run(matrix(ONLY_CAT), plan(("cat", [])), shown=("ant", "bee"))
    assert not out.valid and "unknown worker 'cat'" in (out.error or "")


def test_one_step_is_its_workers_attempt_and_its_cost() -> None:
    data = matrix(ONLY_CAT)
    right, wrong = run(data, plan(("cat", []))), run(data, plan(("ant", [])))
    assert (right.valid, right.right, right.cost) == (True, True, 1.0)
    assert (wrong.valid, wrong.right, wrong.cost) == (True, False, 0.01)
    assert right.reward(0.0) == 1.0 and wrong.reward(0.0) == 0.5  # the research's 1 / 0.5
    assert right.reward(0.2) == pytest.approx(1.0 - 0.2 * 1.0)  # minus λ·USD


def test_the_last_step_carries_a_right_answer_it_may_see_at_the_stated_accuracy() -> None:
    data = matrix(ONLY_CAT)
    sees = plan(("cat", []), ("ant", [0]))
    blind = plan(("cat", []), ("ant", []))
    assert run(data, sees, Rules(carry_accuracy=1.0)).right
    assert not run(data, sees, Rules(carry_accuracy=0.0)).right
    assert not run(data, blind, Rules(carry_accuracy=1.0)).right  # what it may not see, it cannot carry
    assert run(data, sees).cost == pytest.approx(1.01)  # every step is paid
    # the carry is a seeded draw per (seed, task, step): over many tasks its rate is the stated accuracy
    many = matrix(ONLY_CAT * 400)
    env = ReplayEnvironment(many, Rules(carry_accuracy=0.7))
    rate = np.mean([env.outcome(Item(t, "x", WORKERS), sees).right for t in range(many.n)])
    assert rate == pytest.approx(0.7, abs=0.06)


def test_repeated_workers_draw_fresh_attempts_and_one_seed_is_one_world() -> None:
    coin = matrix([[0.5, 0, 0]] * 300)
    one = plan(("ant", []))
    twice = plan(("ant", []), ("ant", []))  # the second attempt is a draw of its own
    env = ReplayEnvironment(coin, Rules(carry_accuracy=0.0))
    firsts = [env.outcome(Item(t, "x", WORKERS), one).right for t in range(coin.n)]
    seconds = [env.outcome(Item(t, "x", WORKERS), twice).right for t in range(coin.n)]
    assert np.mean(firsts) == pytest.approx(0.5, abs=0.08)
    assert np.mean(np.array(firsts) != np.array(seconds)) == pytest.approx(0.5, abs=0.1)
    again = ReplayEnvironment(coin, Rules(carry_accuracy=0.0))
    assert firsts == [again.outcome(Item(t, "x", WORKERS), one).right for t in range(coin.n)]


def test_a_conductor_step_runs_the_sub_workflow_it_plans_and_is_right_when_that_is() -> None:
    data = matrix(ONLY_CAT)
    asked: list[tuple[str, int]] = []

    def replan(task: int, subtask: str, depth: int) -> str:
        asked.append((subtask, depth))
        return plan(("bee", []), ("cat", [0]))

    text = json.dumps({"steps": [{"worker": "conductor", "subtask": "split it", "access": []}]})
    out = run(data, text, Rules(max_depth=1), replan=replan)
    assert out.valid and out.right and asked == [("split it", 1)]
    assert out.workers == ("bee", "cat") and out.cost == pytest.approx(1.1)  # the sub-workflow's steps, paid
    assert out.final_worker == "conductor"
    # without a planner the step fails (as fugu's runner fails it); with no recursion allowed it is invalid
    assert not run(data, text, Rules(max_depth=1)).right
    assert not run(data, text, Rules(max_depth=0), replan=replan).valid
    # an invalid sub-plan fails the step; a sub-plan may not recurse past max_depth
    assert not run(data, text, Rules(max_depth=1), replan=lambda *a: "nonsense").right
    deeper = run(data, text, Rules(max_depth=1), replan=lambda *a: text)
    assert deeper.valid and not deeper.right and deeper.workers == ()


def test_the_steps_of_a_sub_workflow_see_what_their_conductor_step_may_see() -> None:
    data = matrix(ONLY_CAT)
    text = json.dumps(
        {
            "steps": [
                {"worker": "cat", "subtask": "solve", "access": []},
                {"worker": "conductor", "subtask": "check it", "access": [0]},
            ]
        }
    )
    out = run(data, text, Rules(max_depth=1, carry_accuracy=1.0), replan=lambda *a: plan(("ant", [])))
    assert out.right and out.workers == ("cat", "ant")
    text_blind = text.replace('"access": [0]', '"access": []')
    blind = run(data, text_blind, Rules(max_depth=1, carry_accuracy=1.0), replan=lambda *a: plan(("ant", [])))
    assert not blind.right


def test_score_text_uses_the_environment_attempts_of_router_replay() -> None:
    data = matrix([[1, 0, 0], [0, 1, 0]])
    env = ReplayEnvironment(data, Rules())
    assert score_text(env.env, 1, plan(("bee", [])), WORKERS, Rules()).right
    assert not score_text(env.env, 0, plan(("bee", [])), WORKERS, Rules()).right
