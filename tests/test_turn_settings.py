"""The settings a turn runs under are a snapshot the session takes when the turn starts: a change from another
thread (a control request, the REPL) applies from the next turn; an "always" answer holds for the rest of the
run that asked and for every later turn, through the session alone; a custom command's worker and rules hold
for its turn only. Nothing the session and a run share can change under them. Real session, tools, git and
store; scripted words."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.tools import Answer, ApprovalRequest, PermissionPolicy, ToolContext
from fugu_cli.turn_settings import Overrides
from tests.helpers import FIXED, call, make_repo, tool_reply, write_pool

FIX = call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")


def _pool(tmp_path: Path) -> Path:
    workers = [{"name": n, "model": f"openai/{n}", "priority": p} for n, p in (("alpha", 2), ("beta", 1))]
    return write_pool(tmp_path / "pool.toml", workers)


def test_a_mode_changed_during_a_turn_applies_from_the_next_turn(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    started = threading.Event()
    llm = ScriptedLLM([{**tool_reply(FIX), "delay_s": 0.5}, "could not edit", tool_reply(FIX), "fixed"])
    session = build_session(RunOptions(cwd=repo, pool=str(_pool(tmp_path))), llm=llm)
    assert session.settings().mode == "ask"

    def change() -> None:  # a control request from another thread, while the turn runs
        started.wait()
        session.set_permission_mode("auto-edit")

    changer = threading.Thread(target=change)
    changer.start()
    first = session.run_turn("fix calc", lambda e: started.set())
    changer.join()
    assert [d.tool_name for d in first.denied] == ["edit_file"]  # the turn kept the mode it started with
    assert session.settings().mode == "auto-edit"
    second = session.run_turn("fix calc again")
    assert second.denied == () and (repo / "calc.py").read_text() == FIXED


def test_always_holds_for_the_rest_of_the_run_and_later_turns_through_the_session(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Answer:
        asked.append(request)
        return "always"

    status = call("shell", command="git status --short")
    llm = ScriptedLLM([tool_reply(status), tool_reply(status), "clean", tool_reply(status), "still clean"])
    session = build_session(RunOptions(cwd=repo, pool=str(_pool(tmp_path))), llm=llm, approver=approver)
    template = session.deps.agent.tool_ctx.policy
    assert session.run_turn("status twice").status == "success"
    assert [r.prefix for r in asked] == ["shell:git status"]  # asked once: the run kept the answer
    assert "shell:git status" in session.settings().permission.allow
    assert session.run_turn("status again").status == "success"
    assert len(asked) == 1  # the next turn's snapshot holds it
    assert session.deps.agent.tool_ctx.policy == template  # the template the runs copy never changed


def test_a_custom_commands_worker_and_rules_hold_for_its_turn_only(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    llm = ScriptedLLM({"beta": [tool_reply(FIX), "fixed by beta"], "alpha": ["alpha answers"]})
    session = build_session(RunOptions(cwd=repo, pool=str(_pool(tmp_path))), llm=llm)
    before = session.settings()
    result = session.run_turn("fix", overrides=Overrides(worker="beta", allow=("edit",)))
    assert result.status == "success" and result.denied == () and (repo / "calc.py").read_text() == FIXED
    assert list(result.workers) == ["beta"]
    assert session.settings() == before  # nothing to put back: the overrides were never the session's
    assert list(session.run_turn("and now?").workers) == ["alpha"]


def test_what_a_run_and_the_session_share_cannot_change() -> None:
    policy = PermissionPolicy(mode="ask", allow=["shell:ls"])
    ctx = ToolContext(root=Path("."), agent="a", policy=policy)
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.mode = "full-auto"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.policy = PermissionPolicy()  # type: ignore[misc]
    assert isinstance(policy.allow, tuple) and policy.allowing("edit").allow == ("shell:ls", "edit")
    assert policy.allow == ("shell:ls",)  # `allowing` made a new policy
