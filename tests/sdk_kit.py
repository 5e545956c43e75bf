"""Reading fugu's stream-json the way Claude's own SDK does: every line through `claude_agent_sdk`'s message
parser, and the checks every run's lines must pass whatever way it ended."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from claude_agent_sdk import AssistantMessage, ResultMessage, SystemMessage, ToolUseBlock, UserMessage
from claude_agent_sdk._internal.message_parser import parse_message

from tests.helpers import write_pool
from tests.loopback import LoopbackServer

FUGU = str(Path(sys.executable).with_name("fugu"))  # the console script tools/setup installs
CLAUDE_MODES = {"default", "acceptEdits", "bypassPermissions", "plan"}


def pool_file(tmp_path: Path, server: LoopbackServer, *names: str, price: float = 1.0) -> Path:
    """Workers `names` on one loopback server, the first with the highest priority."""
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "api_base": server.base_url,
            "priority": len(names) - i,
            "price_in": price,
            "price_out": price,
        }
        for i, n in enumerate(names)
    ]
    return write_pool(tmp_path / "pool.toml", workers)


def parsed(stdout: str) -> list[tuple[dict[str, Any], Any]]:
    """Every stdout line, raw and as the SDK's parser reads it (a parse error fails the test)."""
    out = []
    for line in stdout.splitlines():
        raw = json.loads(line)
        out.append((raw, parse_message(raw)))
    return out


def check_run(lines: list[tuple[dict[str, Any], Any]], wall_ms: float) -> ResultMessage:
    """What holds for every run: one init first, one result last, typed messages with the fields Claude's
    clients read, and a result whose figures add up to what the lines before it showed."""
    raws = [r for r, _ in lines]
    typed = [m for _, m in lines]
    init, result = typed[0], typed[-1]
    assert isinstance(init, SystemMessage) and init.subtype == "init", raws[0]
    data = init.data
    assert (
        data["mcp_servers"] == [] and data["slash_commands"] == [] and isinstance(data["apiKeySource"], str)
    )
    assert data["permissionMode"] in CLAUDE_MODES and data["model"] and data["tools"]
    sid = data["session_id"]
    assert isinstance(result, ResultMessage) and result.session_id == sid
    assert len({r["uuid"] for r in raws}) == len(raws), "every line has its own uuid"
    assert all(r["session_id"] == sid for r in raws)
    assistants = [m for m in typed if isinstance(m, AssistantMessage)]
    tool_ids = {b.id for m in assistants for b in m.content if isinstance(b, ToolUseBlock)}
    for m in assistants:
        assert m.model.startswith("openai/") and m.message_id and m.message_id.startswith("msg_")
        assert m.stop_reason in ("tool_use", "end_turn") and m.parent_tool_use_id is None
        assert m.session_id == sid and m.uuid
    for m in typed:
        if isinstance(m, UserMessage):
            assert m.parent_tool_use_id is None and m.uuid
            assert all(b.tool_use_id in tool_ids for b in m.content)  # type: ignore[union-attr]
    costs = [r["message"]["usage"]["cost_usd"] for r in raws if r["type"] == "assistant"]
    workers = next(r for r in raws if r["type"] == "result")["workers"]
    model_usage = result.model_usage or {}
    assert result.total_cost_usd == pytest.approx(sum(costs), abs=1e-7)
    assert result.total_cost_usd == pytest.approx(sum(w["cost_usd"] for w in workers.values()), abs=1e-7)
    assert result.total_cost_usd == pytest.approx(sum(u["costUSD"] for u in model_usage.values()), abs=1e-7)
    assert set(model_usage) == {m.model for m in assistants}
    assert sum(u["outputTokens"] for u in model_usage.values()) == (result.usage or {})["output_tokens"]
    assert result.num_turns == len(assistants) == sum(w["steps"] for w in workers.values())
    assert 0 <= result.duration_api_ms <= result.duration_ms <= wall_ms
    assert result.uuid and result.terminal_reason
    assert result.is_error == (result.subtype != "success")
    if result.is_error:
        assert result.errors and all(isinstance(e, str) and e for e in result.errors)
    return result


def routes(lines: list[tuple[dict[str, Any], Any]]) -> list[tuple[int, str, str]]:
    """(step, worker, source) of each route event, as the SDK hands them over (SystemMessage data)."""
    return [
        (m.data["step"], m.data["worker"], m.data["source"])
        for _, m in lines
        if isinstance(m, SystemMessage) and m.subtype == "route"
    ]
