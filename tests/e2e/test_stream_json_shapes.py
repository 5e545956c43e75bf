"""Every stream-json line of differently ending runs, read by `claude_agent_sdk`'s own parser, with the field
values Claude's clients rely on: wall and API time, cost = the workers' costs, turns = steps, structured
permission denials, Claude's subtypes and terminal reasons, exit codes as documented."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from claude_agent_sdk import ResultMessage, SystemMessage
from claude_agent_sdk._internal.message_parser import parse_message

from tests.conductor.kit import tc, write_plan
from tests.helpers import BUGGY, FIXED, call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer, SilentServer
from tests.sdk_kit import check_run, parsed, pool_file, routes

DELAY = 0.4


def _fugu(repo: Path, *args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    run = fugu(*args, cwd=repo, timeout=180)
    return run.code, run.stdout, run.stderr, (time.monotonic() - started) * 1000


def _no_retries() -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")


def test_success_with_tool_use(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script(
        "solo",
        [
            {**tool_reply(call("shell", command="python3 test_calc.py")), "delay_s": DELAY},
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "Fixed add().",
        ],
    )
    pool = pool_file(tmp_path, loopback, "solo")
    args = ["-p", "fix it", "--pool", str(pool), "--output-format", "stream-json", "--verbose"]
    code, out, err, wall = _fugu(
        repo, *args, "--permission-mode", "acceptEdits", "--allowedTools", "Bash(python3:*)"
    )
    assert code == 0, err
    lines = parsed(out)
    result = check_run(lines, wall)
    assert (result.subtype, result.result, result.num_turns) == ("success", "Fixed add().", 3)
    assert (result.stop_reason, result.terminal_reason, result.permission_denials) == (
        "end_turn",
        "completed",
        [],
    )
    assert result.duration_api_ms >= DELAY * 1000 and result.duration_ms >= result.duration_api_ms
    assert list(result.model_usage or {}) == ["openai/solo"] and (result.total_cost_usd or 0) > 0
    assert lines[0][1].data["permissionMode"] == "acceptEdits" and lines[0][1].data["model"] == "auto"
    kinds = [type(m).__name__.removesuffix("Message") for _, m in lines if not isinstance(m, SystemMessage)]
    assert kinds == ["Assistant", "User", "Assistant", "User", "Assistant", "Result"]
    assert (repo / "calc.py").read_text() == FIXED
    assert "will be refused" not in err


def test_refusals_without_a_terminal_are_said_at_start_and_listed_structured(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    shell = call("shell", command="rm -f calc.py")
    write = call("write_file", path="calc.py", content="pwned\n")
    loopback.script("solo", [tool_reply(shell), tool_reply(write), "I may not change anything."])
    pool = pool_file(tmp_path, loopback, "solo")
    code, out, err, wall = _fugu(repo, "-p", "go", "--pool", str(pool), "--output-format", "stream-json")
    assert code == 0, err
    assert (
        err.startswith("fugu: edits and shell commands will be refused") and err.count("will be refused") == 1
    )
    assert "--permission-mode acceptEdits" in err and "bypassPermissions" in err
    lines = parsed(out)
    result = check_run(lines, wall)
    blocks = [b for raw, _ in lines if raw["type"] == "assistant" for b in raw["message"]["content"]]
    ids = [b["id"] for b in blocks if b["type"] == "tool_use"]
    assert result.permission_denials == [
        {"tool_name": "shell", "tool_use_id": ids[0], "tool_input": {"command": "rm -f calc.py"}},
        {
            "tool_name": "write_file",
            "tool_use_id": ids[1],
            "tool_input": {"path": "calc.py", "content": "pwned\n"},
        },
    ]
    assert lines[0][1].data["permissionMode"] == "default"
    assert (repo / "calc.py").read_text() == BUGGY


def test_error_max_turns_exits_53(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("glob", pattern="*.py"))] * 3)
    pool = pool_file(tmp_path, loopback, "solo")
    code, out, err, wall = _fugu(
        repo, "-p", "loop", "--pool", str(pool), "--max-turns", "2", "--output-format", "stream-json"
    )
    assert code == 53, err
    result = check_run(parsed(out), wall)
    assert (result.subtype, result.num_turns, result.terminal_reason) == ("error_max_turns", 2, "max_turns")
    assert result.stop_reason == "tool_use" and "--max-turns" in (result.errors or [""])[0]


def test_error_max_budget_usd_exits_1(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("glob", pattern="*.py"))] * 3)
    pool = pool_file(tmp_path, loopback, "solo", price=1000.0)  # a step costs about $0.2
    code, out, err, wall = _fugu(
        repo, "-p", "loop", "--pool", str(pool), "--max-budget-usd", "0.01", "--output-format", "stream-json"
    )
    assert code == 1, err
    result = check_run(parsed(out), wall)
    assert (result.subtype, result.num_turns, result.terminal_reason) == (
        "error_max_budget_usd",
        1,
        "budget_exhausted",
    )
    assert (result.total_cost_usd or 0) >= 0.01 and "--max-budget-usd" in (result.errors or [""])[0]


def test_failover_then_success(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    _no_retries()
    loopback.script("one", [{"fault": 500}])
    loopback.script("two", [{"content": "done by two", "delay_s": DELAY}])
    pool = pool_file(tmp_path, loopback, "one", "two")
    code, out, err, wall = _fugu(repo, "-p", "x", "--pool", str(pool), "--output-format", "stream-json")
    assert code == 0, err
    lines = parsed(out)
    result = check_run(lines, wall)
    assert routes(lines) == [(1, "one", "prior"), (1, "two", "fallback")]
    failed = [m.data for _, m in lines if isinstance(m, SystemMessage) and m.subtype == "provider_error"]
    assert len(failed) == 1 and failed[0]["worker"] == "one" and "500" in failed[0]["error"]
    assert list(result.model_usage or {}) == ["openai/two"] and result.result == "done by two"
    assert result.duration_api_ms >= DELAY * 1000  # the failed call's time counts too


def test_a_silent_worker_fails_over_after_the_first_byte_timeout(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nfirst_byte_timeout_s = 0.5\n")
    silent = SilentServer()
    loopback.script("two", ["done by two"])
    rows = [
        {"name": "one", "model": "openai/one", "api_base": silent.base_url, "priority": 2},
        {"name": "two", "model": "openai/two", "api_base": loopback.base_url, "priority": 1},
    ]
    pool = write_pool(tmp_path / "pool.toml", [r | {"price_in": 1.0, "price_out": 1.0} for r in rows])
    try:
        code, out, err, wall = _fugu(repo, "-p", "x", "--pool", str(pool), "--output-format", "stream-json")
    finally:
        silent.close()
    assert code == 0, err
    lines = parsed(out)
    result = check_run(lines, wall)
    assert routes(lines) == [(1, "one", "prior"), (1, "two", "fallback")]
    failed = [m.data for _, m in lines if isinstance(m, SystemMessage) and m.subtype == "provider_error"]
    assert len(failed) == 1 and "sent nothing for 0.5 s" in failed[0]["error"]
    assert silent.posts == 1  # the silent worker was asked once: no retry of it
    assert result.result == "done by two"


def test_every_worker_failing_is_error_during_execution(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    _no_retries()
    loopback.script("one", [{"fault": 500}])
    loopback.script("two", [{"fault": 503}])
    pool = pool_file(tmp_path, loopback, "one", "two")
    code, out, err, wall = _fugu(repo, "-p", "x", "--pool", str(pool), "--output-format", "stream-json")
    assert code == 1, err
    result = check_run(parsed(out), wall)
    assert (result.subtype, result.num_turns, result.terminal_reason) == (
        "error_during_execution",
        0,
        "model_error",
    )
    assert (
        result.model_usage == {}
        and "one" in (result.errors or [""])[0]
        and "two" in (result.errors or [""])[0]
    )


def test_interrupted_is_an_execution_error_cut_while_streaming(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("glob", pattern="*.py")), {"content": "late", "delay_s": 30}])
    pool = pool_file(tmp_path, loopback, "solo")
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fugu_cli", "-p", "x", "--pool", str(pool), "--output-format", "stream-json"],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(loopback.requests_for("solo")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    raw = json.loads(out.splitlines()[-1])
    result = check_run(parsed(out), (time.monotonic() - started) * 1000)
    assert (result.subtype, result.terminal_reason) == ("error_during_execution", "aborted_streaming")
    assert raw["fugu_status"] == "interrupted" and result.num_turns == 1


def test_ultra_workflow_lines_and_result(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("alpha", [tool_reply(tc("a1", "read_file", path="calc.py")), "ALPHA: add() subtracts."])
    loopback.script(
        "beta",
        [
            tool_reply(tc("b1", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "BETA: fixed.",
        ],
    )
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"worker": "alpha", "subtask": "Find the bug.", "access": []},
            {"worker": "beta", "subtask": "Fix it.", "access": [0]},
        ],
    )
    pool = pool_file(tmp_path, loopback, "alpha", "beta")
    args = ["-p", "fix", "--plan", str(plan), "--pool", str(pool), "--output-format", "stream-json", "--yes"]
    code, out, err, wall = _fugu(repo, *args)
    assert code == 0, err
    lines = parsed(out)
    result = check_run(lines, wall)
    kinds = {m.subtype for _, m in lines if isinstance(m, SystemMessage)}
    assert {"init", "workflow", "workflow_step", "route"} <= kinds
    assert set(result.model_usage or {}) == {"openai/alpha", "openai/beta"} and result.num_turns == 4
    assert result.result == "BETA: fixed." and (repo / "calc.py").read_text() == FIXED
    assert lines[0][1].data["permissionMode"] == "bypassPermissions"


def test_json_output_is_one_result_message(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", ["four"])
    pool = pool_file(tmp_path, loopback, "solo")
    code, out, err, wall = _fugu(
        repo, "-p", "2+2?", "--pool", str(pool), "--output-format", "json", "--model", "solo"
    )
    assert code == 0, err
    result = parse_message(json.loads(out))
    assert isinstance(result, ResultMessage) and result.result == "four" and result.num_turns == 1
    assert (
        0 < result.duration_ms <= wall
        and result.total_cost_usd == json.loads(out)["workers"]["solo"]["cost_usd"]
    )
    assert (
        json.loads(out)["modelUsage"]["openai/solo"]["outputTokens"] == (result.usage or {})["output_tokens"]
    )
