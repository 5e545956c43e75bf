"""Claude's TypeScript Agent SDK (npm `@anthropic-ai/claude-agent-sdk` 0.3.333, with
`pathToClaudeCodeExecutable` set to fugu) drives fugu: the options it sends inside its `initialize` request
(`systemPrompt`, `appendSystemPrompt`, `mcpServers` with `--await-initialize`) are honoured, and one fugu
cannot honour fails the query with fugu's reason. The SDK is installed from npm on first use (without its
optional native Claude Code binary: fugu is the CLI); skipped only where node and npm are missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import call, make_repo, tool_reply
from tests.loopback import LoopbackServer
from tests.npm_kit import AGENT_SDK, node_or_skip, require
from tests.sdk_kit import FUGU, pool_file

DRIVER = Path(__file__).with_name("node") / "agent_sdk_query.mjs"
CONTROL = Path(__file__).with_name("node") / "agent_sdk_control.mjs"
NOTES = Path(__file__).resolve().parent.parent / "mcp" / "notes_server.py"
FUGUS_OWN = "You are one member of fugu"  # the first words of fugu's instructions (prompts/system.md)


@pytest.fixture(scope="module")
def sdk() -> Path:
    return require("agent-sdk", [AGENT_SDK], optional=False)


def _query(
    sdk: Path, prompt: str, options: dict[str, Any], calls: list[list[Any]] | None = None
) -> list[dict[str, Any]]:
    """The SDK's messages for one query (with `calls`: in streaming input mode, then the result of each
    control method called once the answer is in)."""
    node, _ = node_or_skip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env |= {"FUGU_TEST_NODE_MODULES": str(sdk), "CLAUDE_AGENT_SDK_SKIP_VERSION_CHECK": "1"}
    argv = [node, str(DRIVER), prompt, json.dumps({"pathToClaudeCodeExecutable": FUGU} | options)]
    if calls is not None:
        argv[1:2] = [str(CONTROL)]
        argv.append(json.dumps(calls))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout + done.stderr
    return lines


def _system(loopback: LoopbackServer, model: str) -> str:
    first = loopback.requests_for(model)[0].messages[0]
    assert first["role"] == "system"
    content = first["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_system_prompt_from_initialize_reaches_the_worker(
    sdk: Path, tmp_path: Path, loopback_factory: Any
) -> None:
    replaced: LoopbackServer = loopback_factory()
    appended: LoopbackServer = loopback_factory()
    replaced.script("solo", ["Arr."])
    appended.script("solo", ["Bonjour."])
    repo = make_repo(tmp_path / "repo")
    options = {"cwd": str(repo), "systemPrompt": "You are a pirate. Answer in one word."}
    messages = _query(
        sdk, "hello", options | {"extraArgs": {"pool": str(pool_file(tmp_path, replaced, "solo"))}}
    )
    assert messages[-1]["type"] == "result" and messages[-1]["result"] == "Arr.", messages[-1]
    system = _system(replaced, "solo")
    assert system.startswith("You are a pirate. Answer in one word.") and FUGUS_OWN not in system
    preset = {"type": "preset", "preset": "claude_code", "append": "Always answer in French."}
    (tmp_path / "b").mkdir()
    pool = str(pool_file(tmp_path / "b", appended, "solo"))
    messages = _query(sdk, "hello", {"cwd": str(repo), "systemPrompt": preset, "extraArgs": {"pool": pool}})
    assert messages[-1]["result"] == "Bonjour."
    system = _system(appended, "solo")
    assert system.startswith(FUGUS_OWN) and "Always answer in French." in system


def test_mcp_servers_from_initialize_start_and_answer(
    sdk: Path, tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("mcp__notes__add", a=2, b=40)), "The sum is 42."])
    options = {
        "cwd": str(repo),
        "extraArgs": {"pool": str(pool_file(tmp_path, loopback, "solo"))},
        "mcpServers": {"notes": {"command": sys.executable, "args": [str(NOTES)]}},
        "permissionMode": "bypassPermissions",
        "allowDangerouslySkipPermissions": True,
    }
    messages = _query(sdk, "add 2 and 40 with the notes server", options)
    init = next(m for m in messages if m["type"] == "system" and m["subtype"] == "init")
    assert init["mcp_servers"] == [{"name": "notes", "status": "connected"}]
    assert messages[-1]["type"] == "result" and messages[-1]["result"] == "The sum is 42."
    results = [m["content"] for m in loopback.requests_for("solo")[-1].messages if m["role"] == "tool"]
    assert results == ["42"]


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (
            {"agents": {"reviewer": {"description": "Reviews", "prompt": "Review."}}},
            "initialize agents: fugu has no subagents",
        ),
        ({"agent": "reviewer"}, "--agent: fugu has no agent definitions"),
        ({"persistSession": False}, "--no-session-persistence: fugu records every session"),
    ],
)
def test_an_option_fugu_cannot_honour_fails_the_query(
    sdk: Path, tmp_path: Path, loopback: LoopbackServer, option: dict[str, Any], said: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    options = {"cwd": str(repo), "extraArgs": {"pool": str(pool_file(tmp_path, loopback, "solo"))}} | option
    messages = _query(sdk, "hello", options)
    assert "error" in messages[-1], messages
    assert said in messages[-1]["error"] + messages[-1]["stderr"], messages[-1]
    assert loopback.requests == []  # no worker was asked anything


def test_control_methods_are_honoured_or_refused_with_fugus_reason(
    sdk: Path, tmp_path: Path, loopback: LoopbackServer
) -> None:
    loopback.script("solo", ["Ahoy."])
    repo = make_repo(tmp_path / "repo")
    options = {"cwd": str(repo), "extraArgs": {"pool": str(pool_file(tmp_path, loopback, "solo"))}}
    calls: list[list[Any]] = [
        ["setPermissionMode", "plan"],
        ["setModel", "openai/solo"],
        ["mcpServerStatus"],
        ["setMaxThinkingTokens", 1000],
        ["rewindFiles", "some-message-id"],
    ]
    messages = _query(sdk, "hello", options, calls)
    assert next(m for m in messages if m.get("type") == "result")["result"] == "Ahoy."
    answers = {m["call"]: m for m in messages if "call" in m}
    assert set(answers) == {c[0] for c in calls}, messages[-3:]
    for honoured in ("setPermissionMode", "setModel", "mcpServerStatus"):
        assert "error" not in answers[honoured], answers[honoured]
    assert answers["mcpServerStatus"]["ok"] == []
    for refused, subtype in (
        ("setMaxThinkingTokens", "set_max_thinking_tokens"),
        ("rewindFiles", "rewind_files"),
    ):
        assert f"fugu does not support the '{subtype}' control request" in answers[refused]["error"]
