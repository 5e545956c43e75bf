"""`POST /v1/responses` as Codex and the OpenAI SDK use it: every field of the request read (sent, sent where
the worker takes it, or left out and named in `x-fugu-dropped` and the ledger), non-function tools mapped,
events in OpenAI's order, stored responses continued with `previous_response_id`, and fugu's agent
behind `fugu-agent` even when the client sends tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from fugu_cli.ui.admin import sessions_show
from tests.helpers import call, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.serve_kit import KEY, Serve, pool_file, post, rows

# What Codex 0.171 sends (captured from `codex exec`), trimmed to one tool of each kind.
CODEX: dict[str, Any] = {
    "model": "fugu",
    "input": [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are Codex."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the test"}]},
    ],
    "tools": [
        {
            "type": "function",
            "name": "exec_command",
            "strict": False,
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
        {
            "type": "namespace",
            "name": "multi_agent_v1",
            "description": "sub-agents",
            "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
        },
        {"type": "custom", "name": "apply_patch", "description": "Patch files.", "format": {"type": "text"}},
        {"type": "web_search", "external_web_access": False},
        {"type": "image_generation"},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"effort": "high", "summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "thread-1",
    "client_metadata": {"turn_id": "t1"},
}


def _events(data: list[Any]) -> list[dict[str, Any]]:
    return [e for e in data if isinstance(e, dict)]


def test_codex_request_is_served_and_what_no_worker_takes_is_named(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    loopback.script("alpha", [tool_reply(call("exec_command", cmd="python3 test_calc.py"))])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, headers = post(server.url, CODEX, path="/responses")
    assert status == 200, data
    sent = loopback.requests_for("alpha")[0].body
    names = [t["function"]["name"] for t in sent["tools"]]
    assert names == ["exec_command", "multi_agent_v1__spawn_agent", "apply_patch"]
    assert sent["prompt_cache_key"] == "thread-1"  # litellm lists it for OpenAI-compatible workers
    for absent in (
        "reasoning_effort",
        "reasoning",
        "include",
        "client_metadata",
        "store",
        "web_search_options",
    ):
        assert absent not in sent, absent
    assert [m["role"] for m in sent["messages"]] == ["developer", "user"]
    dropped = headers["x-fugu-dropped"]
    for said in (
        "client_metadata",
        "include reasoning.encrypted_content",
        "reasoning.summary",
        "reasoning_effort: alpha does not take it",
        "tools[web_search]: a search of cached pages only, which no worker has",
        "tools[image_generation]",
    ):
        assert said in dropped, (said, dropped)
    assert data["fugu"]["dropped"] == dropped.split("; ")
    item = data["output"][0]
    assert item["type"] == "function_call" and item["name"] == "exec_command"
    assert json.loads(item["arguments"]) == {"cmd": "python3 test_calc.py"}
    notes = [r[0] for r in rows("SELECT text FROM notes WHERE session_id=?", headers["x-fugu-session"])]
    assert "client_metadata: no worker takes a client's metadata" in notes and len(notes) == len(
        data["fugu"]["dropped"]
    )
    assert sessions_show(headers["x-fugu-session"]) == 0
    assert "not honoured: client_metadata: no worker takes a client's metadata" in capsys.readouterr().out


def test_namespace_and_custom_tool_calls_go_back_as_codex_expects_them(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    patch = "*** Begin Patch\n*** Update File: calc.py\n-    return a - b\n+    return a + b\n*** End Patch"
    reply = tool_reply(
        call("multi_agent_v1__spawn_agent", message="review"),
        call("apply_patch", input=patch),
        content="On it.",
    )
    loopback.script("alpha", [reply, reply])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    _, whole, _ = post(server.url, CODEX, path="/responses")
    kinds = [(i["type"], i.get("namespace"), i.get("name")) for i in whole["output"]]
    assert kinds == [
        ("message", None, None),
        ("function_call", "multi_agent_v1", "spawn_agent"),
        ("custom_tool_call", None, "apply_patch"),
    ]
    assert whole["output"][2]["input"] == patch
    _, streamed, _ = post(server.url, CODEX | {"stream": True}, path="/responses")
    events = _events(streamed)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    order = [(e["type"], e.get("output_index")) for e in events if "output_item" in e["type"]]
    # each item is closed before the next one opens
    assert order == [
        ("response.output_item.added", 0),
        ("response.output_item.done", 0),
        ("response.output_item.added", 1),
        ("response.output_item.done", 1),
        ("response.output_item.added", 2),
        ("response.output_item.done", 2),
    ]
    types = [e["type"] for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert "response.custom_tool_call_input.done" in types
    done = events[-1]["response"]["output"]
    assert [i["type"] for i in done] == [i["type"] for i in whole["output"]] and done[2]["input"] == patch
    assert done[1]["namespace"] == "multi_agent_v1" and done[1]["name"] == "spawn_agent"


def test_history_with_namespaced_and_custom_calls_reaches_the_worker(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    history = [
        {
            "type": "function_call",
            "call_id": "c1",
            "namespace": "multi_agent_v1",
            "name": "spawn_agent",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "agent a1"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "Done!"}],
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
    ]
    body = CODEX | {"input": [*CODEX["input"], *history]}
    status, _, headers = post(server.url, body, path="/responses")
    assert status == 200
    messages = loopback.requests_for("alpha")[0].body["messages"]
    assert messages[2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "agent a1"}
    assert json.loads(messages[4]["tool_calls"][0]["function"]["arguments"]) == {"input": "*** Begin Patch"}
    assert messages[5]["content"] == "Done!"
    assert "input items of type reasoning" in headers["x-fugu-dropped"]


def test_previous_response_id_continues_the_conversation_and_its_session(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", ["Noted: 42.", "You said 42.", "again"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    first = client.responses.create(model="fugu", instructions="Be brief.", input="remember 42")
    second = client.responses.with_raw_response.create(
        model="fugu", input="what did I say?", previous_response_id=first.id
    )
    assert second.parse().output_text == "You said 42."
    sent = loopback.requests_for("alpha")[1].body["messages"]
    assert [(m["role"], _text(m)) for m in sent] == [
        ("user", "remember 42"),
        ("assistant", "Noted: 42."),
        ("user", "what did I say?"),
    ]  # instructions are not carried over, as in OpenAI's API
    assert second.headers["x-fugu-session"] == first.model_extra["fugu"]["session_id"]  # type: ignore[index]
    assert client.responses.retrieve(first.id).output_text == "Noted: 42."
    listed = client.responses.input_items.list(second.parse().id)
    assert [i.type for i in listed.data] == ["message"]
    other = openai.OpenAI(base_url=server.url, api_key="another-key")
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model="fugu", input="hi", previous_response_id=first.id)
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.responses.create(model="fugu", input="and now?", previous_response_id=first.id)
    unstored = client.responses.create(model="fugu", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def _text(message: dict[str, Any]) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def test_stored_responses_expire(tmp_path: Path, loopback: LoopbackServer, serve: Serve) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"), response_ttl_s=0.0)
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    first = client.responses.create(model="fugu", input="hi")
    with pytest.raises(openai.NotFoundError, match="expired"):
        client.responses.create(model="fugu", input="more", previous_response_id=first.id)


def test_streamed_response_is_stored_and_continued(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [{"content": "streamed first", "chunk_size": 3}, "second"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    with client.responses.stream(model="fugu", input="go") as stream:
        final = stream.get_final_response()
    assert final.output_text == "streamed first"
    client.responses.create(model="fugu", input="next", previous_response_id=final.id)
    assert _text(loopback.requests_for("alpha")[1].body["messages"][1]) == "streamed first"


def test_what_would_change_the_answer_is_refused(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    for field, value in (("background", True), ("conversation", "conv_1"), ("prompt", {"id": "pmpt_1"})):
        status, data, _ = post(server.url, {"model": "fugu", "input": "hi", field: value}, path="/responses")
        assert status == 400 and data["error"]["param"] == field, data
    status, data, _ = post(server.url, {"model": "fugu"}, path="/responses")
    assert status == 400 and data["error"]["param"] == "input"
    assert loopback.requests == []


def test_fugu_agent_runs_fugus_agent_even_when_the_client_sends_tools(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script(
        "alpha",
        [tool_reply(call("read_file", path="calc.py")), "add() subtracts.", "Still subtracts."],
    )
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    raw = client.responses.with_raw_response.create(
        model="fugu-agent",
        input="what is wrong in calc.py?",
        tools=CODEX["tools"],
        reasoning={"effort": "high"},
    )
    answer = raw.parse()
    assert answer.output_text == "add() subtracts." and answer.status == "completed"
    first = loopback.requests_for("alpha")[0].body
    offered = {t["function"]["name"] for t in first["tools"]}
    assert "read_file" in offered and "exec_command" not in offered  # fugu's tools, not the client's
    assert (
        "exec_command" in raw.headers["x-fugu-dropped"]
        and "reasoning_effort" in raw.headers["x-fugu-dropped"]
    )
    sid = raw.headers["x-fugu-session"]
    assert rows("SELECT mode FROM sessions WHERE id=?", sid) == [("fugu",)]
    again = client.responses.with_raw_response.create(
        model="fugu-agent",
        input="and now?",
        previous_response_id=answer.id,
        tools=CODEX["tools"],  # type: ignore[arg-type]
    )
    assert again.parse().output_text == "Still subtracts." and again.headers["x-fugu-session"] == sid
    last = loopback.requests_for("alpha")[-1].body["messages"]
    assert any("what is wrong in calc.py?" in _text(m) for m in last if m["role"] == "user")
    notes = rows("SELECT text FROM notes WHERE session_id=? AND text LIKE 'tools:%'", sid)
    assert len(notes) == 1  # the ignored tools are said once per session


def test_fugu_agent_streams_its_answer(tmp_path: Path, loopback: LoopbackServer, serve: Serve) -> None:
    loopback.script("alpha", [{"content": "All good here.", "chunk_size": 4}])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, _ = post(
        server.url, {"model": "fugu-agent", "input": "check", "stream": True}, path="/responses"
    )
    events = _events(data)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert status == 200 and deltas == "All good here."
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "All good here."


def test_chat_completions_fugu_agent_with_tools_runs_the_agent(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", ["agent answer"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    status, data, headers = post(
        server.url,
        {"model": "fugu-agent", "messages": [{"role": "user", "content": "hi"}], "tools": tools},
    )
    assert status == 200 and data["choices"][0]["message"]["content"] == "agent answer"
    assert "get_weather" in headers["x-fugu-dropped"] and "status" in data["fugu"]


def test_embeddings_go_to_the_worker_that_declares_them(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    workers = [
        {"name": "chat", "model": "openai/chat", "api_base": loopback.base_url, "priority": 2},
        {
            "name": "vectors",
            "model": "openai/vectors",
            "api_base": loopback.base_url,
            "priority": 1,
            "embedding_model": "openai/embed-small",
        },
    ]
    server = serve(write_pool(tmp_path / "pool.toml", workers))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    for model in ("fugu", "fugu/vectors", "embed-small"):
        reply = client.embeddings.create(model=model, input=["alpha", "beta"], dimensions=4)
        assert [len(d.embedding) for d in reply.data] == [4, 4] and reply.usage.prompt_tokens > 0
        assert reply.model_extra["fugu"]["worker"] == "vectors"  # type: ignore[index]
    sent = [r for r in loopback.requests if r.path.endswith("/embeddings")]
    assert len(sent) == 3 and all(r.body["model"] == "embed-small" for r in sent)
    same = client.embeddings.create(model="fugu", input="alpha", dimensions=4).data[0].embedding
    assert same == client.embeddings.create(model="fugu", input=["alpha"], dimensions=4).data[0].embedding
    with pytest.raises(openai.NotFoundError, match="worker chat serves no embeddings: declare one"):
        client.embeddings.create(model="fugu/chat", input="x")


def test_embeddings_without_a_declaring_worker_say_how_to_declare_one(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, _ = post(server.url, {"model": "fugu", "input": "x"}, path="/embeddings")
    assert status == 404 and 'embedding_model = "openai/text-embedding-3-small"' in data["error"]["message"]


def test_an_embedding_worker_that_fails_is_retried_then_cools_down(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    import os

    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(
        "[llm]\nmax_retries = 1\nbackoff_base_s = 0.01\n"
    )
    loopback.script("embed-small", [{"fault": 503}, {"fault": 503}])
    workers: list[dict[str, Any]] = [
        {"name": "chat", "model": "openai/chat", "api_base": loopback.base_url, "priority": 2},
        {
            "name": "vectors",
            "model": "openai/v",
            "api_base": loopback.base_url,
            "embedding_model": "openai/embed-small",
        },
    ]
    server = serve(write_pool(tmp_path / "pool.toml", workers))
    status, data, headers = post(server.url, {"model": "fugu", "input": "x"}, path="/embeddings")
    assert status == 502 and headers["x-should-retry"] == "false", data
    message = data["error"]["message"]
    assert "every worker failed" in message and "vectors" in message and "after 2 attempts" in message
    assert len([r for r in loopback.requests if r.path.endswith("/embeddings")]) == 2
    # the worker's health is shared with chat calls: it cools down, and nothing is sent until it is probed
    status, data, headers = post(server.url, {"model": "fugu", "input": "x"}, path="/embeddings")
    assert status == 503 and data["error"]["code"] == "workers_cooling_down" and "Retry-After" in headers
    assert len([r for r in loopback.requests if r.path.endswith("/embeddings")]) == 2


def test_legacy_completions_are_refused_with_what_to_use(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    with pytest.raises(openai.NotFoundError, match="/v1/chat/completions"):
        client.completions.create(model="fugu", prompt="Once upon a time")
    assert loopback.requests == []


def test_a_web_search_tool_and_a_reasoning_effort_reach_the_workers_that_have_them(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    workers = [
        {"name": "o3", "model": "openai/o3", "api_base": loopback.base_url, "priority": 2},
        {"name": "plain", "model": "openai/plain", "api_base": loopback.base_url, "priority": 1},
    ]
    server = serve(write_pool(tmp_path / "pool.toml", workers))
    body = {
        "input": "latest python release?",
        "tools": [{"type": "web_search", "search_context_size": "low"}, CODEX["tools"][0]],
        "reasoning": {"effort": "high"},
    }  # with a function tool, fugu/<worker> is the pass-through to that worker
    _, _, headers = post(server.url, body | {"model": "fugu/o3"}, path="/responses")
    sent = loopback.requests_for("o3")[0].body
    assert sent["reasoning_effort"] == "high" and sent["web_search_options"] == {"search_context_size": "low"}
    assert "x-fugu-dropped" not in headers
    _, _, headers = post(server.url, body | {"model": "fugu/plain"}, path="/responses")
    sent = loopback.requests_for("plain")[0].body
    assert "reasoning_effort" not in sent and "web_search_options" not in sent
    assert headers["x-fugu-dropped"] == (
        "reasoning_effort: plain does not take it; web_search_options: plain does not take it"
    )
