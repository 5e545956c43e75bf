"""Workflow parsing and validation: the JSON form, the three parallel lists, and what is refused (and why)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fugu_cli.conductor.workflow import PlanError, Workflow, load, parse, validate

POOL = ["alpha", "beta", "gamma"]


def test_json_form_in_a_fence_amid_prose() -> None:
    text = (
        "Sure. Here is the plan:\n```json\n"
        '{"steps": [{"worker": "alpha", "subtask": "a", "access": []},'
        ' {"worker": "beta", "subtask": "b"},'
        ' {"worker": "gamma", "subtask": "merge", "access": [1, 0, 1]}]}\n'
        "```\nGood luck."
    )
    wf = parse(text, POOL)
    assert [(s.worker, s.access) for s in wf.steps] == [("alpha", ()), ("beta", ()), ("gamma", (1, 0))]
    assert wf.readers(0) == [2] and wf.readers(2) == []
    assert wf.to_json()[2] == {"step": 2, "worker": "gamma", "subtask": "merge", "access": [1, 0]}


def test_the_original_three_parallel_lists_and_access_all() -> None:
    data = {
        "subtasks": ["solve it", "solve it too", "compare and merge"],
        "model_ids": ["alpha", "beta", "gamma"],
        "access_lists": [[], [], "all"],
    }
    wf = validate(data, POOL)
    assert [(s.worker, s.subtask, s.access) for s in wf.steps][2] == ("gamma", "compare and merge", (0, 1))
    assert parse('[{"worker": "alpha", "subtask": "only step"}]', POOL).steps[0].subtask == "only step"


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"steps": []}, "steps: a workflow has 1 to 5 steps (got 0)"),
        ({"steps": [{"worker": "alpha", "subtask": str(i)} for i in range(6)]}, "1 to 5 steps (got 6)"),
        (
            {"steps": [{"worker": "zeta", "subtask": "x"}]},
            "step 0: unknown worker 'zeta'; use one of: alpha, beta",
        ),
        ({"steps": [{"worker": "alpha", "subtask": "x", "access": [0]}]}, "step 0: access must be empty"),
        (
            {
                "steps": [
                    {"worker": "alpha", "subtask": "x"},
                    {"worker": "beta", "subtask": "y", "access": [1]},
                ]
            },
            "step 1: access [1] must name earlier steps only (0 to 0)",
        ),
        ({"steps": [{"worker": "alpha", "subtask": ""}]}, "steps.0.subtask"),
        ({"steps": [{"worker": "alpha", "subtask": "x", "tools": []}]}, "steps.0.tools: Extra inputs"),
        ({"subtasks": ["a", "b"], "model_ids": ["alpha"]}, "must be lists of the same length"),
    ],
)
def test_invalid_workflows_say_what_is_wrong(data: object, error: str) -> None:
    with pytest.raises(PlanError) as info:
        validate(data, POOL)
    assert error in str(info.value)


def test_the_conductor_as_a_worker_only_below_the_depth_limit() -> None:
    data = {"steps": [{"worker": "conductor", "subtask": "plan this part"}]}
    assert validate(data, POOL).steps[0].worker == "conductor"
    with pytest.raises(PlanError, match="recursion depth limit"):
        validate(data, POOL, allow_conductor=False)


def test_unparseable_replies_and_plan_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="no JSON workflow found"):
        parse("I think alpha should do it.", POOL)
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    with pytest.raises(PlanError, match="is not valid JSON"):
        load(bad, POOL)
    with pytest.raises(PlanError, match="cannot read the plan"):
        load(tmp_path / "missing.json", POOL)
    bad.write_text('{"steps": [{"worker": "alpha", "subtask": "x"}]}')
    assert isinstance(load(bad, POOL), Workflow)
