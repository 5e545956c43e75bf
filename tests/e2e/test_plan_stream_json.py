"""Plan mode driven by a program over stream-json (Claude's own Agent SDK): `set_permission_mode("plan")`
makes the turn read-only; the plan arrives as a `can_use_tool` control request for `exit_plan_mode`, and only
once the program allows it do the workers change files (asking again for each edit, in ask mode)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    PermissionResultAllow,
    ResultMessage,
    SystemMessage,
)

from tests.helpers import BUGGY, FIXED, call, make_repo, tool_reply
from tests.loopback import LoopbackServer
from tests.sdk_kit import FUGU, pool_file

PLAN = "Make add() return a + b in calc.py, then run the test."
EDIT = call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")


def test_the_plan_is_a_control_request_and_files_change_only_after_it_is_allowed(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script(
        "solo",
        [
            tool_reply(EDIT),  # refused: plan mode, nobody is asked
            tool_reply(call("exit_plan_mode", plan=PLAN)),
            tool_reply(EDIT),
            "Fixed add().",
        ],
    )
    asked: list[tuple[str, dict[str, Any], str]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        asked.append((name, tool_input, (repo / "calc.py").read_text()))
        return PermissionResultAllow()

    async def talk() -> list[Any]:
        options = ClaudeAgentOptions(
            cli_path=FUGU,
            cwd=str(repo),
            extra_args={"pool": str(pool_file(tmp_path, loopback, "solo"))},
            can_use_tool=can_use_tool,
        )
        async with ClaudeSDKClient(options) as client:
            await client.set_permission_mode("plan")
            await client.query("fix the failing test")
            received = [m async for m in client.receive_response()]
        return received

    messages = asyncio.run(talk())
    init = next(m for m in messages if isinstance(m, SystemMessage) and m.subtype == "init")
    assert init.data["permissionMode"] == "plan"
    result = messages[-1]
    assert (
        isinstance(result, ResultMessage) and result.subtype == "success" and result.result == "Fixed add()."
    )
    assert [(name, tool_input) for name, tool_input, _ in asked] == [
        ("exit_plan_mode", {"plan": PLAN}),
        ("edit_file", {"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}),
    ]
    assert asked[0][2] == BUGGY  # the plan was asked about before any change
    assert (repo / "calc.py").read_text() == FIXED
    refused = [m for m in loopback.requests_for("solo")[1].messages if m["role"] == "tool"][-1]["content"]
    assert "plan mode: change nothing" in refused
