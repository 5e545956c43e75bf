"""Hooks as Claude Code has them, end to end: the real `fugu -p`, a loopback worker, and hook scripts that
read the event on stdin and answer with exit codes and JSON, run in the sandbox; every run in the ledger."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers import BUGGY, call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

PY = sys.executable
RUFF = str(Path(sys.executable).with_name("ruff"))


def _setup(tmp_path: Path, loopback: LoopbackServer, config: str, replies: list[Any]) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(config)
    if not repo.exists():
        make_repo(repo)
    loopback.script("solo", replies)
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    return repo, str(pool)


def _script(tmp_path: Path, name: str, body: str) -> str:
    """A hook script kept in the repository's .fugu/hooks (a private /tmp hides the test's own folder from
    commands in the sandbox, hooks included)."""
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(repo)
    path = repo / ".fugu" / "hooks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return f"{PY} {path}"


def _hook_runs() -> list[dict[str, Any]]:
    con = sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db")
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute("SELECT * FROM hook_runs ORDER BY rowid")]
    finally:
        con.close()


def _tool_messages(loopback: LoopbackServer) -> list[str]:
    return [str(m["content"]) for m in loopback.requests_for("solo")[-1].messages if m["role"] == "tool"]


def test_a_pre_tool_use_hook_that_exits_2_blocks_a_command_and_the_model_reads_why(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    guard = _script(
        tmp_path,
        "guard.py",
        """
        import json, os, sys
        event = json.load(sys.stdin)
        with open("hook-saw.json", "w") as f:  # the hook's working directory is the repository
            json.dump({"event": event, "env": sorted(os.environ)}, f)
        if event["tool_input"]["command"].startswith("rm "):
            print("rm is not allowed here: move files to trash/ instead", file=sys.stderr)
            sys.exit(2)
        """,
    )
    config = f'[[hooks.PreToolUse]]\nmatcher = "Bash"\ncommand = "{guard}"\ntimeout = 30\n'
    replies = [
        tool_reply(call("shell", command="rm calc.py")),
        tool_reply(call("shell", command="python3 test_calc.py")),
        "calc.py stays; the test fails.",
    ]
    repo, pool = _setup(tmp_path, loopback, config, replies)
    secret = {"PLANTED_SECRET_TOKEN": "sk-planted-0123456789ab"}
    run = fugu("-p", "clean up", "--pool", pool, "--yes", cwd=repo, env=secret)
    assert run.code == 0, run.stderr
    assert (repo / "calc.py").read_text() == BUGGY
    blocked, ran = _tool_messages(loopback)
    assert blocked == "Blocked by a PreToolUse hook: rm is not allowed here: move files to trash/ instead"
    assert "add(2, 3) should be 5" in ran
    saw = json.loads((repo / "hook-saw.json").read_text())
    assert saw["event"]["hook_event_name"] == "PreToolUse" and saw["event"]["tool_name"] == "shell"
    assert saw["event"]["cwd"] == str(repo) and saw["event"]["permission_mode"] == "bypassPermissions"
    assert "CLAUDE_PROJECT_DIR" in saw["env"] and "PLANTED_SECRET_TOKEN" not in saw["env"]
    runs = _hook_runs()
    assert [(r["event"], r["tool"], r["agent"], r["exit_code"], r["outcome"]) for r in runs] == [
        ("PreToolUse", "shell", "solo", 2, "blocked"),
        ("PreToolUse", "shell", "solo", 0, "ok"),
    ]
    assert "rm is not allowed" in runs[0]["stderr"]
    denied = sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db").execute(
        "SELECT tool, denied FROM tool_calls ORDER BY rowid"
    )
    assert list(denied) == [("shell", 1), ("shell", 0)]


def test_a_post_tool_use_formatter_runs_after_an_edit(tmp_path: Path, loopback: LoopbackServer) -> None:
    pick = 'python3 -c \'import json,sys; print(json.load(sys.stdin)[\\"tool_input\\"][\\"file_path\\"])\''
    config = (
        '[[hooks.PostToolUse]]\nmatcher = "Edit|Write"\n'
        f'command = "{RUFF} format --quiet --no-cache \\"$({pick})\\""\n'
    )
    replies = [
        tool_reply(call("write_file", path="shapes.py", content="x=[1,2 ,3]\ny = {'a':1}\n")),
        "Wrote it.",
    ]
    repo, pool = _setup(tmp_path, loopback, config, replies)
    run = fugu("-p", "add shapes.py", "--pool", pool, "--permission-mode", "acceptEdits", cwd=repo)
    assert run.code == 0, run.stderr
    assert (repo / "shapes.py").read_text() == 'x = [1, 2, 3]\ny = {"a": 1}\n'
    (formatted,) = _hook_runs()
    assert (formatted["event"], formatted["tool"], formatted["exit_code"]) == ("PostToolUse", "write_file", 0)


def test_json_answers_allow_deny_and_change_a_call(tmp_path: Path, loopback: LoopbackServer) -> None:
    decide = _script(
        tmp_path,
        "decide.py",
        """
        import json, sys
        command = json.load(sys.stdin)["tool_input"]["command"]
        if command.startswith("python3"):
            out = {"permissionDecision": "allow", "permissionDecisionReason": "tests are fine"}
        elif command.startswith("curl"):
            out = {"permissionDecision": "deny", "permissionDecisionReason": "no network from here"}
        else:
            out = {"updatedInput": {"command": "echo rewritten by the hook"}}
        print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", **out}}))
        """,
    )
    repo, pool = _setup(
        tmp_path,
        loopback,
        "",
        [
            tool_reply(
                call("shell", command="python3 test_calc.py"),
                call("shell", command="curl https://example.com"),
                call("shell", command="date"),
            ),
            "done",
        ],
    )
    (repo / ".claude").mkdir()
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": decide}]}]}
    (repo / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    run = fugu("-p", "check", "--pool", pool, "--trust-project", cwd=repo)  # ask mode, no terminal
    assert run.code == 0, run.stderr
    allowed, denied, changed = _tool_messages(loopback)
    assert "add(2, 3) should be 5" in allowed  # run without a question, as the hook allowed it
    assert denied == "Blocked by a PreToolUse hook: no network from here"
    assert changed.startswith("Permission denied")  # changed, yet still under the policy: nobody to ask
    outcomes = [r["outcome"] for r in _hook_runs()]
    assert outcomes == ["allowed", "blocked", "modified"]


def test_prompt_session_and_stop_hooks(tmp_path: Path, loopback: LoopbackServer) -> None:
    stop = _script(
        tmp_path,
        "stop.py",
        """
        import json, sys
        event = json.load(sys.stdin)
        if not event["stop_hook_active"]:
            print(json.dumps({"decision": "block", "reason": "run the tests before you stop"}))
        """,
    )
    config = (
        '[[hooks.SessionStart]]\ncommand = "echo the team writes British English"\n\n'
        '[[hooks.UserPromptSubmit]]\ncommand = "echo ticket ABC-123"\n\n'
        f'[[hooks.Stop]]\ncommand = "{stop}"\n'
    )
    replies = ["All good.", tool_reply(call("shell", command="python3 test_calc.py")), "Tests fail: add."]
    repo, pool = _setup(tmp_path, loopback, config, replies)
    run = fugu("-p", "is add right?", "--pool", pool, "--yes", cwd=repo)
    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "Tests fail: add."
    first, second, third = (r.messages for r in loopback.requests_for("solo"))
    system = [m["content"] for m in first if m["role"] == "system"]
    assert any("the team writes British English" in s for s in system), (system, run.stderr, _hook_runs())
    assert first[-1]["content"] == (
        "is add right?\n\n<user-prompt-submit-hook>\nticket ABC-123\n</user-prompt-submit-hook>"
    )
    assert second[-1] == {
        "role": "user",
        "content": "<Stop-hook>\nrun the tests before you stop\n</Stop-hook>",
    }
    assert "add(2, 3) should be 5" in third[-1]["content"]
    assert [(r["event"], r["outcome"]) for r in _hook_runs()] == [
        ("SessionStart", "context"),
        ("UserPromptSubmit", "context"),
        ("Stop", "blocked"),
        ("Stop", "ok"),
    ]


def test_a_prompt_hook_refuses_and_a_slow_hook_is_stopped(tmp_path: Path, loopback: LoopbackServer) -> None:
    refuse = _script(
        tmp_path,
        "refuse.py",
        """
        import json, sys
        if "sk-" in json.load(sys.stdin)["prompt"]:
            print("the prompt holds a key: remove it", file=sys.stderr)
            sys.exit(2)
        """,
    )
    config = (
        f'[[hooks.UserPromptSubmit]]\ncommand = "{refuse}"\n\n'
        '[[hooks.PreToolUse]]\ncommand = "sleep 30"\ntimeout = 0.5\n'
    )
    repo, pool = _setup(
        tmp_path, loopback, config, [tool_reply(call("read_file", path="calc.py")), "read it"]
    )
    run = fugu("-p", "use sk-abcdefghijklmnop", "--pool", pool, "--output-format", "json", cwd=repo)
    assert run.code == 1
    result = json.loads(run.stdout)
    assert result["is_error"] and "the prompt holds a key: remove it" in result["result"]
    assert loopback.requests_for("solo") == []  # no worker saw it

    run = fugu("-p", "read calc.py", "--pool", pool, cwd=repo)
    assert run.code == 0, run.stderr
    assert "timed out after 0.5 s" in run.stderr  # said, and the call went on
    assert "def add" in _tool_messages(loopback)[0]
    assert [(r["event"], r["outcome"]) for r in _hook_runs()][-2:] == [
        ("UserPromptSubmit", "ok"),
        ("PreToolUse", "timeout"),
    ]
