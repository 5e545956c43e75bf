"""The `task` tool end to end: the real CLI in stream-json against loopback workers. A worker hands a
subtask to a subagent; the subagent's requests carry only its own transcript; the router (or the custom
agent's model) staffs it; its answer is the call's result; the ledger keeps its calls under its own scope;
its lines carry `parent_tool_use_id` (read by Claude's own SDK parser)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from claude_agent_sdk import AssistantMessage, ToolUseBlock
from claude_agent_sdk._internal.message_parser import parse_message

from fugu_cli.store import Store
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

FINDER = """---
name: finder
description: Finds where a function is defined and reports file and line.
tools: Read, Grep, Glob
model: scout
---
You are the finder. Report the file and the line, nothing else.
"""

SUBTASK = "Find where add() is defined; report the file and line."


def _pool(tmp_path: Path, server: LoopbackServer) -> Path:
    workers = [
        {"name": "lead", "model": "openai/lead", "api_base": server.base_url, "priority": 1},
        {"name": "scout", "model": "openai/scout", "api_base": server.base_url, "priority": 2},
    ]
    return write_pool(tmp_path / "pool.toml", [{**w, "price_in": 1.0, "price_out": 1.0} for w in workers])


def _run(repo: Path, pool: Path, *extra: str) -> list[dict[str, Any]]:
    args = ["-p", "Where is add defined? Use a subagent.", "--pool", str(pool), "--worker", "lead"]
    run = fugu(*args, "--output-format", "stream-json", "--verbose", *extra, cwd=repo, timeout=300)
    assert run.code == 0, run.stderr
    lines = run.events()
    for line in lines:
        parse_message(line)  # Claude's SDK reads every line, the nested ones included
    return lines


def _roles(request_messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in request_messages]


def test_a_custom_agent_by_name_runs_isolated_on_its_own_worker(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".claude" / "agents").mkdir(parents=True)
    (repo / ".claude" / "agents" / "finder.md").write_text(FINDER)
    task = call("task", description="find add", prompt=SUBTASK, subagent_type="finder")
    loopback.script("lead", [tool_reply(task), "add() is in calc.py, line 1 (the finder says)."])
    loopback.script("scout", [tool_reply(call("grep", pattern="def add")), "calc.py:1 def add(a, b)"])
    lines = _run(repo, _pool(tmp_path, loopback), "--trust-project")

    # the subagent's requests: its own system prompt (with the agent's instructions) and its prompt, no more
    scout = loopback.requests_for("scout")
    assert len(scout) == 2
    first = scout[0].messages
    assert _roles(first) == ["system", "user"] and first[1]["content"] == SUBTASK
    assert "You are the finder." in first[0]["content"]
    assert "Where is add defined" not in json.dumps(scout[1].messages)
    tools = {t["function"]["name"] for t in scout[0].body["tools"]}
    assert tools == {"read_file", "grep", "glob"}  # the agent's tools; no task (depth 1), no todo list

    # its answer is the lead's tool result
    lead = loopback.requests_for("lead")
    tool_msgs = [m for m in lead[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["calc.py:1 def add(a, b)"]

    # stream-json: the nested lines carry the task call's id
    task_id = next(
        b.id
        for _, m in ((raw, parse_message(raw)) for raw in lines)
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock) and b.name == "task"
    )
    nested = [raw for raw in lines if raw.get("parent_tool_use_id") == task_id]
    kinds = [(r["type"], r.get("subtype")) for r in nested]
    assert ("system", "subagent_start") in kinds and ("system", "subagent_finish") in kinds
    assert [r["message"]["model"] for r in nested if r["type"] == "assistant"] == ["openai/scout"] * 2
    assert all(r.get("parent_tool_use_id") is None for r in lines if r not in nested)
    result = lines[-1]
    assert result["type"] == "result" and result["subtype"] == "success"
    assert set(result["workers"]) == {"lead", "scout"}  # the subagent's cost is the turn's
    assert result["total_cost_usd"] == sum(w["cost_usd"] for w in result["workers"].values())

    # the ledger: the subagent's calls under its own scope, attributed to its worker
    store = Store(Path(os.environ["FUGU_HOME"]) / "fugu.db")
    sid = result["session_id"]
    scopes = store.scopes(sid)
    sub = [s for s in scopes if s != "main"]
    assert sub == [f"main/t1.{task_id}"]
    calls = store.tool_calls(sid, sub[0], None)
    assert [(c.tool, c.agent) for c in calls] == [("grep", "scout")]
    assert [(c.tool, c.agent) for c in store.tool_calls(sid, "main", None)] == [("task", "lead")]


def test_the_router_staffs_a_general_subagent_and_an_untrusted_repo_offers_no_agents(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".claude" / "agents").mkdir(parents=True)
    (repo / ".claude" / "agents" / "finder.md").write_text(FINDER)
    named = call("task", description="find add", prompt=SUBTASK, subagent_type="finder")
    general = call("task", description="find add", prompt=SUBTASK)
    loopback.script("lead", [tool_reply(named), tool_reply(general), "calc.py line 1."])
    loopback.script("scout", [tool_reply(call("read_file", path="calc.py")), "calc.py:1"])
    lines = _run(repo, _pool(tmp_path, loopback))

    lead = loopback.requests_for("lead")
    described = next(t for t in lead[0].body["tools"] if t["function"]["name"] == "task")
    assert "general-purpose" in described["function"]["description"]
    assert "finder" not in described["function"]["description"]  # the folder is not trusted
    refused = [m for m in lead[1].messages if m["role"] == "tool"]
    assert "no agent named 'finder'" in refused[0]["content"]
    # the lead was forced (--worker lead); its subagent was routed: the prior picked the higher priority
    routes = [
        r
        for r in lines
        if r.get("parent_tool_use_id") and r.get("subtype") == "route" and r["type"] == "system"
    ]
    assert routes and all(r["worker"] == "scout" for r in routes)
    answered = [m for m in lead[2].messages if m["role"] == "tool"]
    assert answered[-1]["content"] == "calc.py:1"
    init = lines[0]
    assert init["type"] == "system" and "task" in init["tools"]
