"""The agent's own moves in the real REPL (a pty, loopback workers): plan mode ends with a plan the user
approves before any file changes, the todo list is shown as it is written, and a subagent's steps appear
under the `task` call that started it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import BUGGY, FIXED, call, tool_reply
from tests.loopback import LoopbackServer
from tests.ui.test_repl_pty import PROMPT, SLOW, Term, repo, server

__all__ = ["repo", "server"]  # the fixtures, shared with the REPL's other pty tests

PLAN = "1. In calc.py, make add() return a + b.\n2. Run python3 test_calc.py."
TODOS = [
    {"content": "Fix add in calc.py", "status": "pending"},
    {"content": "Run the test", "status": "pending"},
]
EDIT = call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")


def test_plan_mode_asks_before_anything_changes_then_runs_the_plan(
    repo: Path, server: LoopbackServer
) -> None:
    server.script(
        "alpha",
        [
            tool_reply(call("read_file", path="calc.py")),
            tool_reply(EDIT),  # refused: plan mode is read-only
            tool_reply(call("todo_write", todos=TODOS)),
            tool_reply(call("exit_plan_mode", plan=PLAN)),
            tool_reply(EDIT),
            tool_reply(call("todo_write", todos=[{**t, "status": "completed"} for t in TODOS])),
            "Fixed add().",
        ],
    )
    child = Term(repo)
    child.turn("/plan")
    child.expect("plan mode: the workers explore read-only")
    child.expect(r"fugu \[plan\] ›")
    child.wait_raw()
    child.send("fix the failing test\r")
    child.expect(r"alpha ▸ edit calc\.py", timeout=SLOW)
    child.expect("☐ Fix add in calc.py", timeout=SLOW)
    child.expect("alpha has a plan:", timeout=SLOW)
    child.expect(r"make add\(\) return a \+ b")
    child.expect(r"Run this plan\?")
    assert (repo / "calc.py").read_text() == BUGGY  # nothing changed before the approval
    child.send("a")
    child.expect("running the plan, edits accepted")
    child.expect(r"alpha ▸ edit calc\.py", timeout=SLOW)
    child.expect("✔ Run the test", timeout=SLOW)
    child.expect("Fixed add().", timeout=SLOW)
    child.finished()
    assert (repo / "calc.py").read_text() == FIXED

    requests = server.requests_for("alpha")
    first = requests[0]
    assert any("You are in plan mode" in (m.get("content") or "") for m in first.messages)
    assert "exit_plan_mode" in {t["function"]["name"] for t in first.body["tools"]}
    refused = [m for m in requests[2].messages if m["role"] == "tool"][-1]["content"]
    assert refused.startswith("Permission denied") and "plan mode: change nothing" in refused
    approved = [m for m in requests[4].messages if m["role"] == "tool"][-1]["content"]
    assert approved.startswith("The user approved the plan")

    child.send("/todos\r")
    child.expect("✔ Fix add in calc.py")
    child.expect(PROMPT)
    assert "[plan]" not in child.text[child.pos - 20 :]  # the approval left plan mode
    child.quit()


def test_a_subagents_steps_show_under_its_task_call(repo: Path, server: LoopbackServer) -> None:
    task = call("task", description="find add", prompt="Where is add() defined? Report file and line.")
    # the turn's steps and its subagent's (the router staffs it with alpha, the top priority) in order
    server.script(
        "alpha", [tool_reply(task), tool_reply(call("grep", pattern="def add")), "calc.py:1", "In calc.py."]
    )
    child = Term(repo)
    child.turn("where is add?")
    child.expect("⤷ subagent general-purpose: find add", timeout=SLOW)
    child.expect(r"│ ↳ alpha \(.*prior.*\) · grep def add", timeout=SLOW)
    child.expect(r"│ ↳ alpha .* · \$0\.\d+", timeout=SLOW)
    child.expect(r"╰ general-purpose: success, 2 steps, alpha", timeout=SLOW)
    child.expect(r"alpha ▸ task → general-purpose: find add")
    child.expect("In calc.py.", timeout=SLOW)
    child.finished()
    sub = server.requests_for("alpha")[1].messages
    assert [m["role"] for m in sub] == ["system", "user"] and "where is add?" not in str(sub)
    child.send("/trace\r")
    child.expect(r"\[main/t1\.")
    child.expect(r"alpha: grep def add")
    child.expect(PROMPT)
    child.quit()


def test_rewind_lists_every_edit_and_goes_back_to_one(repo: Path, server: LoopbackServer) -> None:
    server.script(
        "alpha",
        [
            tool_reply(call("write_file", path="notes.txt", content="first\n")),
            tool_reply(EDIT),
            tool_reply(call("write_file", path="extra.txt", content="third\n")),
            "Three edits.",
            "Back.",
        ],
    )
    child = Term(repo, "--permission-mode", "full-auto")
    child.turn("make three edits")
    child.expect("Three edits.", timeout=SLOW)
    child.finished()
    child.send("/rewind\r")
    child.expect(r"1  turn 1  [\d:]+  before the turn's first change")
    child.expect(r"2  turn 1  [\d:]+  after write notes\.txt")
    child.expect(r"3  turn 1  [\d:]+  after edit calc\.py")
    child.expect(r"4  turn 1  [\d:]+  after write extra\.txt")
    child.expect(PROMPT)
    child.wait_raw()
    child.send("/rewind 3\r")
    child.expect(r"restored 1 path\(s\): extra\.txt; the conversation is back to checkpoint 3")
    child.expect(PROMPT)
    assert not (repo / "extra.txt").exists() and (repo / "calc.py").read_text() == FIXED
    assert (repo / "notes.txt").read_text() == "first\n"
    child.wait_raw()
    child.send("where are we?\r")
    child.expect("Back.", timeout=SLOW)
    child.finished()
    sent = server.requests_for("alpha")[-1].messages
    said = [m for m in sent if m["role"] != "system"]  # fugu's instructions and the repo map aside
    assert [m["role"] for m in said] == ["user", "assistant", "tool", "assistant", "tool", "user"]
    assert "extra.txt" not in str(said), said
    child.quit()
