"""Claude's own Agent SDK drives fugu as its CLI (`ClaudeAgentOptions(cli_path=fugu)`): the argv it builds,
the stream-json it writes on stdin (initialize, user messages, control requests) and the typed messages it
reads back, against loopback workers. Nothing but the fugu process it starts is contacted."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    query,
)

from tests.helpers import FIXED, call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.sdk_kit import FUGU, pool_file


def _collect(prompt: Any, options: ClaudeAgentOptions) -> list[Any]:
    async def run() -> list[Any]:
        return [m async for m in query(prompt=prompt, options=options)]

    return asyncio.run(run())


def _routes(messages: list[Any]) -> list[tuple[str, str]]:
    return [
        (m.data["worker"], m.data["source"])
        for m in messages
        if isinstance(m, SystemMessage) and m.subtype == "route"
    ]


def test_query_with_fugu_as_cli_fixes_a_failing_test(tmp_path: Path, loopback_factory: Any) -> None:
    a: LoopbackServer = loopback_factory()
    b: LoopbackServer = loopback_factory()
    repo = make_repo(tmp_path / "repo")
    workers = [
        {"name": "alpha", "model": "openai/alpha", "api_base": a.base_url, "priority": 2, "price_in": 1.0},
        {"name": "beta", "model": "openai/beta", "api_base": b.base_url, "priority": 1, "price_in": 0.5},
    ]
    pool = write_pool(tmp_path / "pool.toml", workers)
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")
    a.script(
        "alpha",
        [
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(call("read_file", path="calc.py")),
        ]
        + [{"fault": 500}] * 3,
    )
    b.script(
        "beta",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "Fixed: add() subtracted; test_calc.py passes now.",
        ],
    )
    stderr: list[str] = []
    options = ClaudeAgentOptions(
        cli_path=FUGU,
        cwd=str(repo),
        system_prompt="You are a careful coding agent. Keep answers short.",
        allowed_tools=["Bash(python3:*)", "Edit"],
        max_turns=10,
        extra_args={"pool": str(pool)},
        stderr=stderr.append,
    )
    messages = _collect("fix the failing test", options)

    init, result = messages[0], messages[-1]
    assert isinstance(init, SystemMessage) and init.subtype == "init"
    assert isinstance(result, ResultMessage) and result.subtype == "success" and not result.is_error
    assert result.session_id == init.data["session_id"] and result.num_turns == 5
    assert result.total_cost_usd and result.total_cost_usd > 0
    assert set(result.model_usage or {}) == {"openai/alpha", "openai/beta"}
    assert result.result == "Fixed: add() subtracted; test_calc.py passes now."

    assistants = [m for m in messages if isinstance(m, AssistantMessage)]
    uses = [b for m in assistants for b in m.content if isinstance(b, ToolUseBlock)]
    assert [u.name for u in uses] == ["shell", "read_file", "edit_file", "shell"]
    assert [m.model for m in assistants] == ["openai/alpha"] * 2 + ["openai/beta"] * 3
    outputs = {
        b.tool_use_id: str(b.content)
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }
    assert "AssertionError" in outputs[uses[0].id] and "ok" in outputs[uses[3].id]
    assert _routes(messages) == [
        ("alpha", "prior"),
        ("alpha", "prior"),
        ("alpha", "prior"),
        ("beta", "fallback"),
        ("beta", "prior"),
        ("beta", "prior"),
    ]
    assert (repo / "calc.py").read_text() == FIXED
    first = a.requests_for("alpha")[0].messages[0]
    assert first["role"] == "system" and first["content"].startswith("You are a careful coding agent.")
    assert any("that no allow rule covers will be refused" in line for line in stderr)


async def _two_prompts() -> AsyncIterator[dict[str, Any]]:
    for text in ("remember 42", "what did I say?"):
        yield {"type": "user", "message": {"role": "user", "content": text}, "parent_tool_use_id": None}


def test_two_turns_over_stream_json_input(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", ["first answer", "you said 42"])
    options = ClaudeAgentOptions(
        cli_path=FUGU, cwd=str(repo), extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))}
    )
    messages = _collect(_two_prompts(), options)

    results = [m for m in messages if isinstance(m, ResultMessage)]
    assert [r.result for r in results] == ["first answer", "you said 42"]
    assert results[0].session_id == results[1].session_id
    assert [r.num_turns for r in results] == [1, 1]
    inits = [m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init"]
    assert len(inits) == 2
    sent = loopback.requests_for("solo")[1].messages
    assert [m["content"] for m in sent if m["role"] != "system"] == [
        "remember 42",
        "first answer",
        "what did I say?",
    ]


def test_control_requests_model_permission_mode_and_interrupt(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".fugu" / "commands").mkdir(parents=True)
    (repo / ".fugu" / "commands" / "fix-issue.md").write_text(
        "---\ndescription: Fix an issue by number\nargument-hint: NUMBER\n---\nFix issue #$ARGUMENTS.\n"
    )
    loopback.script("one", ["one speaking"])
    loopback.script(
        "two",
        [
            tool_reply(call("write_file", path="NOTES.md", content="hi\n")),
            "wrote it",
            {"content": "too late", "delay_s": 30},
            "still here",
        ],
    )
    pool = pool_file(tmp_path, loopback, "one", "two")

    async def talk() -> tuple[dict[str, Any] | None, list[list[Any]]]:
        turns: list[list[Any]] = []
        options = ClaudeAgentOptions(cli_path=FUGU, cwd=str(repo), extra_args={"pool": str(pool)})
        async with ClaudeSDKClient(options) as client:
            info = await client.get_server_info()
            await client.query("who is there?")
            turns.append([m async for m in client.receive_response()])
            await client.set_model("openai/two")
            await client.set_permission_mode("acceptEdits")
            await client.query("write NOTES.md")
            turns.append([m async for m in client.receive_response()])
            await client.query("take your time")
            while len(loopback.requests_for("two")) < 3:
                await asyncio.sleep(0.05)
            await client.interrupt()
            turns.append([m async for m in client.receive_response()])
            await client.query("are you there?")
            turns.append([m async for m in client.receive_response()])
        return info, turns

    info, turns = asyncio.run(talk())
    assert info is not None and [m["value"] for m in info["models"]] == ["auto", "one", "two"]
    assert info["commands"] == [
        {"name": "fix-issue", "description": "Fix an issue by number (project)", "argumentHint": "NUMBER"}
    ]
    assert _routes(turns[0]) == [("one", "prior")]
    assert _routes(turns[1]) == [("two", "override"), ("two", "override")]
    assert turns[1][0].data["permissionMode"] == "acceptEdits" and turns[1][0].data["model"] == "openai/two"
    assert (repo / "NOTES.md").read_text() == "hi\n"
    cut = turns[2][-1]
    assert isinstance(cut, ResultMessage) and cut.subtype == "error_during_execution"
    assert cut.terminal_reason == "aborted_streaming" and cut.is_error
    last = turns[3][-1]
    assert (
        isinstance(last, ResultMessage) and last.result == "still here" and last.session_id == cut.session_id
    )
    texts = [
        b.text
        for m in turns[3]
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    assert texts == ["still here"]


def test_can_use_tool_is_asked_before_edits_and_commands(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script(
        "solo",
        [
            tool_reply(call("shell", command="rm -rf .git")),
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "fixed, without deleting anything",
        ],
    )
    asked: list[tuple[str, dict[str, Any], str | None]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        asked.append((name, tool_input, context.tool_use_id))
        if name == "shell" and tool_input["command"].startswith("rm"):
            return PermissionResultDeny(message="no deleting")
        return PermissionResultAllow()

    async def prompt() -> AsyncIterator[dict[str, Any]]:
        yield {"type": "user", "message": {"role": "user", "content": "fix it"}, "parent_tool_use_id": None}

    options = ClaudeAgentOptions(
        cli_path=FUGU,
        cwd=str(repo),
        extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))},
        can_use_tool=can_use_tool,
    )
    messages = _collect(prompt(), options)
    result = messages[-1]
    assert isinstance(result, ResultMessage) and result.subtype == "success"
    uses = [
        b
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    assert asked == [
        ("shell", {"command": "rm -rf .git"}, uses[0].id),
        ("edit_file", {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}, uses[1].id),
        ("shell", {"command": "python3 test_calc.py"}, uses[2].id),
    ]
    assert result.permission_denials == [
        {"tool_name": "shell", "tool_use_id": uses[0].id, "tool_input": {"command": "rm -rf .git"}}
    ]
    assert (repo / ".git").is_dir() and (repo / "calc.py").read_text() == FIXED


def test_hooks_are_refused_clearly(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")

    async def hook(data: HookInput, tool_use_id: str | None, context: HookContext) -> HookJSONOutput:
        return {}

    options = ClaudeAgentOptions(
        cli_path=FUGU,
        cwd=str(repo),
        extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))},
        hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[hook])]},
    )
    with pytest.raises(Exception, match="fugu runs no SDK hook callbacks"):
        _collect("hello", options)
    assert loopback.requests_for("solo") == []


def test_an_unsupported_option_fails_with_one_line(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    stderr: list[str] = []
    options = ClaudeAgentOptions(
        cli_path=FUGU,
        cwd=str(repo),
        extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))},
        settings=str(tmp_path / "settings.json"),
        stderr=stderr.append,
    )
    with pytest.raises(Exception, match="exit code 2"):
        _collect("hello", options)
    assert stderr == [
        "fugu: --settings: fugu reads .fugu/config.toml and FUGU_* variables, not Claude Code's --settings"
    ]
    assert json.dumps(stderr).count("Traceback") == 0


def test_the_sdks_mcp_servers_are_fugus(tmp_path: Path, loopback: LoopbackServer) -> None:
    """`mcp_servers=` reaches fugu as --mcp-config: fugu starts the server and its tool is called."""
    repo = make_repo(tmp_path / "repo")
    clock = str(Path(sys.executable).with_name("mcp-server-time"))
    loopback.script("solo", [tool_reply(call("mcp__clock__get_current_time", timezone="UTC")), "It is now."])
    options = ClaudeAgentOptions(
        cli_path=FUGU,
        cwd=str(repo),
        extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))},
        mcp_servers={"clock": {"command": clock, "args": []}},
        permission_mode="bypassPermissions",
    )
    messages = _collect("what time is it?", options)
    init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
    assert init.data["mcp_servers"] == [{"name": "clock", "status": "connected"}]
    assert isinstance(messages[-1], ResultMessage) and messages[-1].result == "It is now."
    results = [m["content"] for m in loopback.requests_for("solo")[-1].messages if m["role"] == "tool"]
    assert '"timezone": "UTC"' in results[0]


def test_resume_and_continue_options_carry_the_session_on(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", ["noted", "you said 42", "still 42"])
    pool = str(pool_file(tmp_path, loopback, "solo"))

    def result_of(prompt: str, **options: Any) -> ResultMessage:
        messages = _collect(
            prompt, ClaudeAgentOptions(cli_path=FUGU, cwd=str(repo), extra_args={"pool": pool}, **options)
        )
        assert isinstance(messages[-1], ResultMessage)
        return messages[-1]

    first = result_of("remember 42")
    resumed = result_of("what did I say?", resume=first.session_id)
    continued = result_of("and now?", continue_conversation=True)
    assert first.session_id == resumed.session_id == continued.session_id
    sent = loopback.requests_for("solo")[2].messages
    assert [m["content"] for m in sent if m["role"] != "system"] == [
        "remember 42",
        "noted",
        "what did I say?",
        "you said 42",
        "and now?",
    ]
