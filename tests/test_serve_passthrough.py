"""Model `fugu`, the router-only pass-through, driven by real clients (the openai SDK, litellm) against
loopback workers: the client's tools and parameters reach the worker, its answer comes back unchanged."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import cast

import openai
import pytest
from openai.types.chat import (
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)
from pydantic import BaseModel

from tests.loopback import LoopbackServer
from tests.serve_kit import KEY, Serve, ask, no_retries, pool_file, post, rows

WEATHER: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _client(url: str, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=2, **kw)  # type: ignore[arg-type]


def test_sdk_tools_round_trip_goes_to_the_routed_worker_with_the_clients_tools(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script(
        "alpha",
        [
            {
                "content": None,
                "tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Kyoto"}}],
            }
        ],
    )
    loopback.script("alpha", ["It is sunny in Kyoto."])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    client = _client(server.url)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather in Kyoto?"}]
    first = client.chat.completions.create(
        model="fugu", messages=messages, tools=[WEATHER], tool_choice="auto"
    )
    [call] = first.choices[0].message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)  # a function call, not a custom tool's
    assert first.choices[0].finish_reason == "tool_calls" and call.id == "call_1"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Kyoto"}
    assert first.model == "fugu" and first.model_extra is not None
    assert first.model_extra["fugu"]["worker"] == "alpha" and first.model_extra["fugu"]["source"] == "prior"

    messages += [cast("ChatCompletionMessageParam", first.choices[0].message.model_dump(exclude_none=True))]
    messages += [{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24 C"}]
    second = client.chat.completions.create(model="fugu", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == "It is sunny in Kyoto."

    sent = loopback.requests_for("alpha")
    assert [r.body["tools"] for r in sent] == [[WEATHER], [WEATHER]]
    assert sent[0].body["tool_choice"] == "auto" and sent[1].messages[-1]["content"] == "sunny, 24 C"
    # one session (the second call continues the first's conversation), two ledger rows with cost
    sid = first.model_extra["fugu"]["session_id"]
    assert second.model_extra is not None and second.model_extra["fugu"]["session_id"] == sid
    steps = rows("SELECT worker, status, cost_usd FROM steps WHERE session_id = ? ORDER BY rowid", sid)
    assert [(w, s) for w, s, _ in steps] == [("alpha", "ok"), ("alpha", "ok")] and all(
        c > 0 for *_, c in steps
    )
    assert rows("SELECT mode FROM sessions WHERE id = ?", sid) == [("pass",)]
    assert len(rows("SELECT * FROM route_decisions WHERE session_id = ?", sid)) == 2


def test_sdk_parameters_reach_the_worker_and_n_gives_n_choices(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    reply = _client(server.url).chat.completions.create(
        model="fugu",
        messages=[{"role": "user", "content": "two haiku"}],
        n=2,
        max_tokens=50,
        stop=["END"],
        temperature=0.3,
        seed=7,
        response_format={"type": "json_object"},
    )
    assert [c.index for c in reply.choices] == [0, 1]
    body = loopback.requests_for("alpha")[0].body
    assert (body["n"], body["max_tokens"], body["stop"], body["temperature"], body["seed"]) == (
        2,
        50,
        ["END"],
        0.3,
        7,
    )
    assert body["response_format"] == {"type": "json_object"}


def test_naive_streaming_loop_and_usage_only_when_asked(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [{"content": "streamed answer", "chunk_size": 3}] * 2)
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = _client(server.url)
    stream = client.chat.completions.create(
        model="fugu", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = ""
    for chunk in stream:  # the loop every tutorial shows: it indexes choices[0] on every chunk
        text += chunk.choices[0].delta.content or ""
    assert text == "streamed answer"

    stream = client.chat.completions.create(
        model="fugu",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert (
        chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    )
    assert all(c.usage is None for c in chunks[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "streamed answer"


def test_streamed_tool_call_fragments_come_through(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script(
        "alpha",
        [
            {
                "content": None,
                "tool_calls": [{"id": "c9", "name": "get_weather", "arguments": {"city": "Oslo"}}],
            }
        ],
    )
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    stream = _client(server.url).chat.completions.create(
        model="fugu",
        messages=[{"role": "user", "content": "Oslo?"}],
        tools=[WEATHER],
        stream=True,
    )
    chunks = list(stream)
    args = "".join(
        tc.function.arguments or ""
        for c in chunks
        for tc in c.choices[0].delta.tool_calls or ()
        if tc.function
    )
    assert json.loads(args) == {"city": "Oslo"} and chunks[-1].choices[0].finish_reason == "tool_calls"
    assert loopback.requests_for("alpha")[0].body["stream_options"] == {"include_usage": True}


def test_async_client_and_parse_with_a_pydantic_model(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    class Sum(BaseModel):
        total: int
        explanation: str

    loopback.script("alpha", ["hello from async", json.dumps({"total": 5, "explanation": "2 + 3"})])
    server = serve(pool_file(tmp_path, loopback, "alpha"))

    async def both() -> tuple[str | None, Sum | None]:
        client = openai.AsyncOpenAI(base_url=server.url, api_key=KEY)
        plain = await client.chat.completions.create(
            model="fugu", messages=[{"role": "user", "content": "hi"}]
        )
        parsed = await client.chat.completions.parse(
            model="fugu", messages=[{"role": "user", "content": "2+3?"}], response_format=Sum
        )
        await client.close()
        return plain.choices[0].message.content, parsed.choices[0].message.parsed

    plain, parsed = asyncio.run(both())
    assert plain == "hello from async" and parsed == Sum(total=5, explanation="2 + 3")
    schema = loopback.requests_for("alpha")[1].body["response_format"]
    assert schema["type"] == "json_schema" and schema["json_schema"]["name"] == "Sum"


def test_failover_then_all_failed_is_502_that_the_sdk_does_not_retry(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    no_retries()
    loopback.script("alpha", [{"fault": 500}, {"fault": 500}])
    loopback.script("beta", ["beta saved it", {"fault": 503}])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    client = _client(server.url)
    saved = client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "hi"}])
    assert saved.choices[0].message.content == "beta saved it"
    assert saved.model_extra is not None
    assert (
        saved.model_extra["fugu"]["failed"] == ["alpha"] and saved.model_extra["fugu"]["source"] == "fallback"
    )

    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "again"}])
    assert failed.value.status_code == 502 and failed.value.response.headers["x-should-retry"] == "false"
    assert "alpha cooling down" in failed.value.message and "beta" in failed.value.message
    # alpha failed the first request, so it cools down: the second goes to beta alone; no client retry on top
    assert [r.model for r in loopback.requests if r.method == "POST"] == ["alpha", "beta", "beta"]
    statuses = [s for (s,) in rows("SELECT status FROM steps ORDER BY rowid")]
    assert statuses == ["provider_error", "ok", "provider_error"]


def test_a_request_every_worker_refuses_is_a_400(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [{"fault": 400}])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, _ = post(server.url, ask("hi"))
    assert status == 400 and data["error"]["type"] == "invalid_request_error"
    assert "refused" in data["error"]["message"]


def test_bad_parameters_are_refused_naming_them(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    cases = {
        "n": ask("hi", n=0),
        "max_tokens": ask("hi", max_tokens="lots"),
        "temperature": ask("hi", temperature=3),
        "stop": ask("hi", stop=["a", "b", "c", "d", "e"]),
        "response_format": ask("hi", response_format={"type": "yaml"}),
        "stream_options": ask("hi", stream_options={"include_usage": True}),
        "messages": {"model": "fugu", "messages": []},
    }
    for param, body in cases.items():
        status, data, _ = post(server.url, body)
        assert status == 400 and data["error"]["param"] == param, (param, data)
    assert loopback.requests == []


def test_session_header_groups_calls_and_an_unknown_id_is_refused(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, first, headers = post(server.url, ask("one"))
    sid = headers["X-Fugu-Session"]
    assert status == 200 and first["fugu"]["session_id"] == sid
    status, second, _ = post(server.url, ask("unrelated"), {"X-Fugu-Session": sid})
    assert second["fugu"]["session_id"] == sid
    assert len(rows("SELECT * FROM steps WHERE session_id = ?", sid)) == 2
    status, third, _ = post(server.url, ask("another"))  # no header, no known prefix: a new session
    assert third["fugu"]["session_id"] != sid
    status, data, _ = post(server.url, ask("x", user="alice"), {"X-Fugu-Session": "alice"})
    assert status == 404 and data["error"]["code"] == "session_not_found"


def test_litellm_as_a_client_plain_and_streamed(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    import litellm

    loopback.script("alpha", ["plain reply", {"content": "streamed reply", "chunk_size": 4}])
    server = serve(pool_file(tmp_path, loopback, "alpha"), api_key=KEY)
    reply = litellm.completion(
        model="openai/fugu", api_base=server.url, api_key=KEY, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "plain reply" and reply.usage.total_tokens > 0
    chunks = litellm.completion(
        model="openai/fugu",
        api_base=server.url,
        api_key=KEY,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed reply"


def test_models_list_and_retrieve(tmp_path: Path, loopback: LoopbackServer, serve: Serve) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    client = _client(server.url)
    assert [m.id for m in client.models.list()] == [
        "fugu",
        "fugu-agent",
        "fugu-ultra",
        "fugu/alpha",
        "fugu/beta",
    ]
    assert client.models.retrieve("fugu").id == "fugu"
    assert client.models.retrieve("fugu/beta").owned_by == "fugu"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_forced_worker_with_tools_goes_to_that_worker(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    status, data, _ = post(server.url, ask("hi", model="fugu/beta", tools=[WEATHER]))
    assert status == 200 and data["fugu"]["worker"] == "beta" and data["fugu"]["source"] == "override"
    assert loopback.requests_for("alpha") == [] and loopback.requests_for("beta")[0].body["tools"] == [
        WEATHER
    ]


def test_a_client_that_leaves_mid_stream_closes_the_workers_stream(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [{"content": "x" * 400, "chunk_size": 4, "chunk_delay_s": 0.05}])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    body = json.dumps({"model": "fugu", "messages": [{"role": "user", "content": "long"}], "stream": True})
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body.encode())
        seen = b""
        while b"data: " not in seen:
            seen += sock.recv(4096)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not rows("SELECT status FROM steps"):
        time.sleep(0.1)
    assert rows("SELECT status FROM steps") == [("interrupted",)]
    sent = loopback.requests_for("alpha")[0]
    while time.monotonic() < deadline and sent.status is None:
        time.sleep(0.1)
    assert sent.status == 499  # fugu hung up on the worker: its next chunk found no reader


def test_concurrent_calls_each_leave_their_session_route_and_step_rows(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    """24 pass-through calls at once (their decisions batched by the shared router), half streamed: each
    answered, each a session of its own with its title, one route decision and one step, all in the store
    when the replies are in and still there after the server stopped."""
    import threading

    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"), api_key=KEY)
    client = _client(server.url)
    sessions: dict[int, str] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(24)

    def call(i: int) -> None:
        try:
            start.wait()
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": f"task number {i}"}]
            if i % 2:
                with client.chat.completions.with_streaming_response.create(
                    model="fugu", messages=messages, stream=True
                ) as raw:
                    sessions[i] = raw.headers["x-fugu-session"]
                    assert "[DONE]" in raw.text()
            else:
                raw_reply = client.chat.completions.with_raw_response.create(model="fugu", messages=messages)
                sessions[i] = raw_reply.headers["x-fugu-session"]
                assert raw_reply.parse().choices[0].message.content
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(set(sessions.values())) == 24

    def ledger() -> list[tuple[object, ...]]:
        return rows(
            "SELECT s.id, s.title, s.mode,"
            " (SELECT count(*) FROM route_decisions r WHERE r.session_id = s.id),"
            " (SELECT count(*) FROM steps t WHERE t.session_id = s.id AND t.status = 'ok')"
            " FROM sessions s ORDER BY s.id"
        )

    want = sorted((sid, f"task number {i}", "pass", 1, 1) for i, sid in sessions.items())
    assert ledger() == want
    server.stop()
    assert ledger() == want
