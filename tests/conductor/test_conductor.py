"""Ultra mode in process (app.build_session with a scripted LLM): fallback, memory, conflicts, recursion."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from fugu_cli import memory
from fugu_cli.app import RunOptions, build_session
from fugu_cli.config import fugu_home
from fugu_cli.errors import UsageError
from fugu_cli.events import Event, Notice, WorkflowPlanned, WorkflowStepFinished
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.tools import ApprovalRequest
from tests.conductor.kit import tc, write_plan
from tests.helpers import BUGGY, FIXED, make_repo, write_pool


def reply(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"content": content, "tool_calls": list(calls)}


def open_session(
    tmp_path: Path, repo: Path, llm: ScriptedLLM, plan: Path | None = None, approver: Any = None, **opts: Any
) -> Session:
    names = ["alpha", "beta"]
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "description": f"worker {n}",
            "priority": 2 - i,
            "price_in": 1.0,
            "price_out": 2.0,
        }
        for i, n in enumerate(names)
    ]
    pool = write_pool(tmp_path / "pool.toml", workers)
    opts = {"ultra": True, "permission_mode": "full-auto", **opts}
    return build_session(RunOptions(cwd=repo, pool=str(pool), plan=plan, **opts), llm=llm, approver=approver)


def first_user(llm: ScriptedLLM, worker: str, marker: str = "Your subtask") -> str:
    for call in llm.calls:
        if call.worker == worker and len(call.messages) > 1 and marker in (call.messages[1].content or ""):
            return call.messages[1].content or ""
    raise AssertionError(f"no workflow-step call for {worker}")


def test_an_invalid_plan_twice_falls_back_to_fugu_mode_visibly(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    llm = ScriptedLLM(
        {"alpha": ["I would rather just do it.", '{"steps": []}', "FUGU-ANSWER: done in fugu mode"]}
    )
    events: list[Event] = []
    result = open_session(tmp_path, repo, llm).run_turn("explain calc.py", events.append)
    assert result.status == "success" and result.result == "FUGU-ANSWER: done in fugu mode"
    notices = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert len(notices) == 1 and "invalid twice" in notices[0] and "running in fugu mode" in notices[0]
    assert "steps" in notices[0]  # the validation error is shown
    assert not [e for e in events if isinstance(e, WorkflowPlanned)]
    repair = llm.calls[1].messages[-1].content or ""
    assert "no JSON workflow found" in repair
    assert result.workers["alpha"].steps == 3  # two planning calls plus the fugu-mode step


def test_a_conductor_that_calls_tools_is_told_so_not_to_raise_a_limit(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = reply({"name": "read_file", "arguments": {"path": "calc.py"}})
    llm = ScriptedLLM({"alpha": [plan, plan, "FUGU-ANSWER: done in fugu mode"]})
    events: list[Event] = []
    result = open_session(tmp_path, repo, llm).run_turn("explain calc.py", events.append)
    assert result.status == "success"
    (notice,) = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert "the conductor called tools instead of writing a workflow" in notice
    assert "--max-turns" not in notice


def test_a_fact_from_workflow_1_reaches_workflow_2_after_continue(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan1 = write_plan(tmp_path / "p1.json", [{"worker": "alpha", "subtask": "Find the port.", "access": []}])
    plan2 = write_plan(tmp_path / "p2.json", [{"worker": "beta", "subtask": "Use the port.", "access": []}])
    llm = ScriptedLLM(
        {
            "alpha": [
                reply(
                    tc("c1", "shell", command="echo the-port-is-8123"), tc("c2", "read_file", path="calc.py")
                ),
                "found it",
            ],
            "beta": ["used it"],
        }
    )
    first = open_session(tmp_path, repo, llm, plan1)
    assert first.run_turn("find the port").status == "success"
    assert "the-port-is-8123" not in first_user(llm, "alpha")
    second = open_session(tmp_path, repo, llm, plan2, continue_last=True)
    assert second.id == first.id
    assert second.run_turn("use the port").status == "success"
    seen = first_user(llm, "beta")
    assert "$ echo the-port-is-8123 → exit 0: the-port-is-8123" in seen
    assert f"read calc.py: sha1 {memory.text_hash(BUGGY)}, 2 lines" in seen
    shown = memory.render(second.deps.store, second.id)
    assert "workflow 1:" in shown and "the-port-is-8123" in shown and "[alpha]" in shown
    scopes = {r["scope"] for r in second.deps.store.query("SELECT DISTINCT scope FROM steps")}
    assert {"wf1.s0", "wf2.s0"} <= scopes


def test_a_conflicting_final_apply_leaves_the_users_files_and_saves_the_patch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    meanwhile = "# the user rewrote this meanwhile\n"
    # the step's shell plays the user editing their tree meanwhile: only possible with the sandbox off
    (fugu_home() / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    plan = write_plan(tmp_path / "p.json", [{"worker": "alpha", "subtask": "Fix calc.py.", "access": []}])
    llm = ScriptedLLM(
        {
            "alpha": [
                reply(tc("u", "shell", command=f"printf '{meanwhile.strip()}\\n' > {repo / 'calc.py'}")),
                reply(tc("e", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
                "fixed",
            ]
        }
    )
    result = open_session(tmp_path, repo, llm, plan).run_turn("fix it")
    assert result.is_error and result.status == "error_during_execution"
    assert (repo / "calc.py").read_text() == meanwhile
    assert result.error and "left untouched" in result.error
    saved = Path(result.error.rsplit("git apply --3way ", 1)[1])
    assert saved.is_file() and "+    return a + b" in saved.read_text()


def test_a_conductor_step_plans_again_and_its_result_flows_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(
        tmp_path / "p.json",
        [
            {"worker": "conductor", "subtask": "Write part.txt, any way you like.", "access": []},
            {"worker": "alpha", "subtask": "Check part.txt and finish.", "access": [0]},
        ],
    )
    sub = {"steps": [{"worker": "beta", "subtask": "Write part.txt containing 'part'.", "access": []}]}
    llm = ScriptedLLM(
        {
            "alpha": [json.dumps(sub), "ALPHA: part.txt looks right"],
            "beta": [reply(tc("w", "write_file", path="part.txt", content="part\n")), "BETA: wrote part.txt"],
        }
    )
    events: list[Event] = []
    result = open_session(tmp_path, repo, llm, plan).run_turn("make part.txt", events.append)
    assert result.status == "success", result.error
    assert (repo / "part.txt").read_text() == "part\n"
    planned = [e for e in events if isinstance(e, WorkflowPlanned)]
    assert [(e.source, e.parent_step) for e in planned] == [("plan-file", None), ("recursion", 0)]
    recurse = next(c for c in llm.calls if c.worker == "alpha")
    assert "Write part.txt, any way you like." in (recurse.messages[1].content or "")
    final = first_user(llm, "alpha")
    assert "BETA: wrote part.txt" in final and "+part" in final
    finished = [(e.parent_step, e.step, e.worker) for e in events if isinstance(e, WorkflowStepFinished)]
    assert finished == [(0, 0, "beta"), (None, 0, "conductor"), (None, 1, "alpha")]
    scopes = [r["scope"] for r in open_scopes(result.session_id, tmp_path, repo, llm)]
    assert scopes == ["wf1.s0.plan", "wf1.s0.s0", "wf1.s1"]


def open_scopes(sid: str, tmp_path: Path, repo: Path, llm: ScriptedLLM) -> list[Any]:
    session = open_session(tmp_path, repo, llm, resume=sid)
    return session.deps.store.query("SELECT scope FROM steps GROUP BY scope ORDER BY MIN(rowid)")


def test_ultra_switches_on_a_live_session_and_a_bad_plan_file_is_a_usage_error(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(tmp_path / "p.json", [{"worker": "alpha", "subtask": "x", "access": [0]}])
    with pytest.raises(UsageError, match=r"access \[0\] must name earlier steps only|access must be empty"):
        open_session(tmp_path, repo, ScriptedLLM(), plan)
    good = write_plan(tmp_path / "g.json", [{"worker": "beta", "subtask": "answer", "access": []}])
    llm = ScriptedLLM({"alpha": ["FUGU"], "beta": ["ULTRA"]})
    session = open_session(tmp_path, repo, llm, good, ultra=False)
    assert not session.ultra
    assert session.run_turn("one").result == "FUGU"
    session.set_ultra(True)
    assert session.run_turn("two").result == "ULTRA"
    assert [m.content for m in session.messages if m.role == "assistant"] == ["FUGU", "ULTRA"]


@pytest.mark.parametrize("answer", ["yes", "no"])
def test_in_ask_mode_steps_edit_their_worktrees_freely_and_the_final_apply_is_asked(
    tmp_path: Path, answer: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(tmp_path / "p.json", [{"worker": "alpha", "subtask": "Fix calc.py.", "access": []}])
    edit = tc("e", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")
    llm = ScriptedLLM({"alpha": [reply(edit), "fixed"]})
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Any:
        asked.append(request)
        return answer

    session = open_session(tmp_path, repo, llm, plan, approver=approver, permission_mode="ask")
    result = session.run_turn("fix it")
    # the step's own edit (in its worktree) was not asked; applying to the user's tree was
    assert [(r.tool, r.kind) for r in asked] == [("apply_workflow", "edit")]
    assert "+    return a + b" in asked[0].detail and "calc.py" in asked[0].summary
    if answer == "yes":
        assert result.status == "success" and (repo / "calc.py").read_text() == FIXED
        assert session.undo() == ["calc.py"] and (repo / "calc.py").read_text() == BUGGY
    else:
        assert result.is_error and (repo / "calc.py").read_text() == BUGGY
        assert result.error and "you declined" in result.error and ".patch" in result.error


def test_changes_that_reach_no_later_step_are_saved_not_applied(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(
        tmp_path / "p.json",
        [
            {"worker": "alpha", "subtask": "Write a.txt.", "access": []},
            {"worker": "beta", "subtask": "Write b.txt.", "access": []},
        ],
    )
    llm = ScriptedLLM(
        {
            "alpha": [reply(tc("a", "write_file", path="a.txt", content="a\n")), "wrote a"],
            "beta": [reply(tc("b", "write_file", path="b.txt", content="b\n")), "wrote b"],
        }
    )
    events: list[Event] = []
    result = open_session(tmp_path, repo, llm, plan).run_turn("write files", events.append)
    assert result.status == "success" and result.result == "wrote b"
    assert (repo / "b.txt").read_text() == "b\n" and not (repo / "a.txt").exists()
    warning = next(e.text for e in events if isinstance(e, Notice) and "reach no later step" in e.text)
    saved = Path(warning.rsplit(": ", 1)[1])
    assert "+a" in saved.read_text()


def test_outside_a_git_repository_the_steps_share_the_directory_and_say_so(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    plan = write_plan(tmp_path / "p.json", [{"worker": "alpha", "subtask": "Write a.txt.", "access": []}])
    llm = ScriptedLLM({"alpha": [reply(tc("a", "write_file", path="a.txt", content="a\n")), "wrote a"]})
    events: list[Event] = []
    result = open_session(tmp_path, plain, llm, plan).run_turn("write a file", events.append)
    assert result.status == "success" and (plain / "a.txt").read_text() == "a\n"
    assert any(isinstance(e, Notice) and "no git worktrees" in e.text for e in events)


def test_ultra_settings_choose_the_conductor_and_limit_each_step(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text('[ultra]\nconductor = "beta"\nstep_max_turns = 1\n')
    plan = {"steps": [{"worker": "alpha", "subtask": "Read calc.py forever.", "access": []}]}
    llm = ScriptedLLM(
        {"beta": [json.dumps(plan)], "alpha": [reply(tc("r", "read_file", path="calc.py")), "never reached"]}
    )
    result = open_session(tmp_path, repo, llm).run_turn("read")
    assert [c.worker for c in llm.calls] == ["beta", "alpha"]
    assert result.status == "error_max_turns"
    assert (
        result.error and "step 0 (alpha) did not finish" in result.error and "step limit (1)" in result.error
    )


def test_changes_flow_down_a_chain_but_answers_only_through_the_access_list(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    plan = write_plan(
        tmp_path / "p.json",
        [
            {"worker": "alpha", "subtask": "Create a.txt.", "access": []},
            {"worker": "conductor", "subtask": "Improve a.txt and add b.txt.", "access": [0]},
            {"worker": "alpha", "subtask": "Check the files.", "access": [1]},
        ],
    )
    sub = {"steps": [{"worker": "beta", "subtask": "Capitalise a.txt; write b.txt.", "access": []}]}
    llm = ScriptedLLM(
        {
            "alpha": [
                reply(tc("w", "write_file", path="a.txt", content="a\n")),
                "ALPHA0: created a.txt",
                json.dumps(sub),
                reply(tc("r", "read_file", path="a.txt")),
                "ALPHA2: checked",
            ],
            "beta": [
                reply(
                    tc("e", "edit_file", path="a.txt", old_text="a", new_text="A"),
                    tc("b", "write_file", path="b.txt", content="b\n"),
                ),
                "BETA: capitalised a.txt, wrote b.txt",
            ],
        }
    )
    result = open_session(tmp_path, repo, llm, plan).run_turn("files")
    assert result.status == "success", result.error
    assert (repo / "a.txt").read_text() == "A\n" and (repo / "b.txt").read_text() == "b\n"
    final = [
        c for c in llm.calls if c.worker == "alpha" and "Check the files." in (c.messages[1].content or "")
    ]
    assert "BETA: capitalised a.txt" in (final[0].messages[1].content or "")
    assert all("ALPHA0" not in json.dumps([m.to_json() for m in c.messages]) for c in final)
    assert "1\tA" in (
        final[-1].messages[-1].content or ""
    )  # its worktree held step 0's file, as step 1 left it
    planning = next(
        c for c in llm.calls if c.worker == "alpha" and "Improve a.txt" in (c.messages[1].content or "")
    )
    assert "ALPHA0: created a.txt" in (planning.messages[1].content or "")  # the conductor sees its inputs
