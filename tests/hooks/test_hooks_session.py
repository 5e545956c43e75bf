"""Hook answers in process (a scripted LLM, real hook commands in the sandbox): "ask" puts the question to
the user whatever the mode, `"continue": false` ends the turn, PostToolUse context reaches the model."""

from __future__ import annotations

import io
import json
import os
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

from rich.console import Console

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.tools import Answer, ApprovalRequest
from fugu_cli.ui import commands
from tests.conductor.kit import tc
from tests.helpers import make_repo, tool_reply, write_pool


def _session(tmp_path: Path, llm: ScriptedLLM, hooks: str, approver: object = None) -> Session:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(hooks)
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    opts = RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto")
    return build_session(opts, llm=llm, approver=approver)  # type: ignore[arg-type]


def _answer(tmp_path: Path, name: str, reply: Mapping[str, object]) -> str:
    """A hook command that prints `reply` (kept in the repository: the sandbox's /tmp is its own)."""
    script = tmp_path / "repo" / ".fugu" / "hooks" / name
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(
        textwrap.dedent(f"import sys; sys.stdin.read(); print({json.dumps(json.dumps(reply))})\n")
    )
    return f"python3 {script}"


def test_a_hook_that_asks_puts_the_question_even_in_full_auto(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    ask = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",
                                  "permissionDecisionReason": "it deletes files"}}  # fmt: skip
    hooks = f'[[hooks.PreToolUse]]\nmatcher = "shell"\ncommand = "{_answer(tmp_path, "ask.py", ask)}"\n'
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Answer:
        asked.append(request)
        return "no"

    llm = ScriptedLLM([tool_reply(tc("c1", "shell", command="rm -f calc.py")), "left it"])
    session = _session(tmp_path, llm, hooks, approver)
    result = session.run_turn("tidy")
    assert [r.summary for r in asked] == [
        "rm -f calc.py (a PreToolUse hook asks you to confirm: it deletes files)"
    ]
    assert (tmp_path / "repo" / "calc.py").exists()
    assert [d.tool_name for d in result.denied] == ["shell"]
    (refusal,) = [m.content for m in llm.calls[-1].messages if m.role == "tool"]
    assert refusal == "Permission denied: the user declined shell (a hook asked (it deletes files))"
    out = io.StringIO()

    class Ctx:
        console = Console(file=out, width=200, force_terminal=False)

    Ctx.session = session  # type: ignore[attr-defined]
    assert commands.dispatch(Ctx(), "/trace")  # type: ignore[arg-type]
    assert "solo: $ rm -f calc.py denied" in out.getvalue()
    assert re.search(r"hook PreToolUse `python3 \S+ask\.py` exit 0: asked", out.getvalue())


def test_continue_false_ends_the_turn_and_context_reaches_the_model(tmp_path: Path) -> None:
    make_repo(tmp_path / "repo")
    context = {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "calc.py is generated"}
    }
    stop = {"continue": False, "stopReason": "the build is broken upstream"}
    adds, stops = _answer(tmp_path, "ctx.py", context), _answer(tmp_path, "stop.py", stop)
    hooks = (
        f'[[hooks.PostToolUse]]\nmatcher = "read_file"\ncommand = "{adds}"\n\n'
        f'[[hooks.PostToolUse]]\nmatcher = "grep"\ncommand = "{stops}"\n'
    )
    llm = ScriptedLLM(
        [
            tool_reply(tc("c1", "read_file", path="calc.py")),
            tool_reply(tc("c2", "grep", pattern="add"), tc("c3", "read_file", path="test_calc.py")),
            "never asked",
        ]
    )
    session = _session(tmp_path, llm, hooks)
    result = session.run_turn("look")
    assert result.status == "error_during_execution"
    assert result.error == "stopped by a hook: the build is broken upstream"
    assert len(llm.calls) == 2  # no step after the stop
    (first,) = [m.content or "" for m in llm.calls[1].messages if m.role == "tool"]
    assert first.endswith("<PostToolUse-hook>\ncalc.py is generated\n</PostToolUse-hook>")
    tools = [(m.name, (m.content or "")[:30]) for m in session.messages if m.role == "tool"][1:]
    assert tools[1] == ("read_file", "Not run: a hook stopped the tu")  # every call still has its result
    runs = session.deps.store.hook_runs(session.id)
    assert [(r.tool, r.outcome) for r in runs] == [("read_file", "feedback"), ("grep", "stopped")]
