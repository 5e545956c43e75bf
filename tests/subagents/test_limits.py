"""The `task` tool's limits, in process (real session, tools, git and store; scripted words): how many
subagents a turn may start, how deep they nest, and a subagent's budget, which never exceeds what its caller
has left. Each limit reaches the calling worker as an error result it can read."""

from __future__ import annotations

import os
from pathlib import Path

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from tests.helpers import call, make_repo, tool_reply, write_pool


def _config(text: str) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(text)


def _run(tmp_path: Path, script: ScriptedLLM, task: str = "delegate", **opts: object) -> list[str]:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    session = build_session(RunOptions(cwd=repo, pool=str(pool), **opts), llm=script)  # type: ignore[arg-type]
    session.run_turn(task)
    return [c.result for c in session.ledger.tool_calls() if c.tool == "task"]


def test_a_turn_starts_no_more_subagents_than_its_limit(tmp_path: Path) -> None:
    _config("[subagents]\nmax_per_turn = 1\n")
    one = call("task", description="one", prompt="say one")
    two = call("task", description="two", prompt="say two")
    script = ScriptedLLM([tool_reply(one), "one", tool_reply(two), "done"])
    results = _run(tmp_path, script)
    assert results[0] == "one"
    assert "this turn has started 1 subagents, its limit ([subagents] max_per_turn)" in results[1]
    assert len(script.calls) == 4  # the refused call started no subagent


def test_subagents_nest_only_as_deep_as_allowed(tmp_path: Path) -> None:
    _config("[subagents]\nmax_depth = 2\n")
    outer = call("task", description="outer", prompt="delegate again")
    inner = call("task", description="inner", prompt="say deep")
    script = ScriptedLLM([tool_reply(outer), tool_reply(inner), "deep", "inner said deep", "all done"])
    results = _run(tmp_path, script)
    assert results == ["inner said deep"]
    offered = [{t["function"]["name"] for t in c.tools} for c in script.calls]
    assert "task" in offered[0] and "task" in offered[1]  # the turn's agent, and the first subagent
    assert "task" not in offered[2]  # the second level may not hand off again
    assert "todo_write" not in offered[1]  # the list is the caller's


def test_a_subagent_stops_at_the_budget_its_caller_has_left(tmp_path: Path) -> None:
    task = call("task", description="costly", prompt="spend")
    costly = {**tool_reply(call("glob", pattern="*.py")), "cost_usd": 0.6}
    script = ScriptedLLM(
        [
            {**tool_reply(task), "cost_usd": 0.5},
            costly,  # over what the turn had left (1.0 - 0.5): the subagent stops after this step
            costly,
            "I will stop.",
        ]
    )
    results = _run(tmp_path, script, max_budget_usd=1.0, permission_mode="full-auto")
    assert len(results) == 1 and "The subagent (general-purpose) stopped after 1 step(s)" in results[0]
    assert "max budget" in results[0]
    assert len(script.calls) == 2  # its cost counts toward the turn's, which then stops too (0.5 + 0.6 > 1)
