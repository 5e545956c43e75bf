"""The pass-through call (`llm/forward.py`) on both of its paths against loopback servers: OpenAI-compatible
workers posted to directly, an Anthropic-shaped worker through litellm. One attempt a call, retried by the
worker-call service as the agent's are; the same OpenAI shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from fugu_cli.calls import RetryPolicy
from fugu_cli.errors import ProviderError
from fugu_cli.llm.client import ClientConfig
from fugu_cli.llm.forward import Forwarder, RequestRejected
from fugu_cli.types import Worker
from tests.calls_kit import through_calls
from tests.loopback import LoopbackServer

TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}
FAST = ClientConfig()
RETRY = RetryPolicy(max_retries=2, backoff_base_s=0.0, backoff_max_s=0.0)


def _workers(server: LoopbackServer) -> list[Worker]:
    return [
        Worker("oa", "openai/oa", api_base=server.base_url, price_in=1.0, price_out=1.0),
        Worker("an", "anthropic/an", api_base=server.url, price_in=1.0, price_out=1.0),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["direct", "litellm"])
def test_tool_call_whole_and_streamed_in_openai_shape(loopback: LoopbackServer, index: int) -> None:
    worker = _workers(loopback)[index]
    reply = {"content": None, "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}]}
    loopback.script(worker.model, [reply, reply])
    forwarder = Forwarder(FAST)
    params = {"messages": [{"role": "user", "content": "find x"}], "tools": [TOOL], "max_tokens": 30}
    whole = forwarder.complete(worker, params)
    message = whole.body["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "lookup"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"q": "x"}
    assert whole.body["choices"][0]["finish_reason"] == "tool_calls" and whole.usage.cost_usd > 0

    stream = forwarder.stream(worker, params)
    chunks = list(stream)
    args = "".join(
        tc["function"].get("arguments") or ""
        for c in chunks
        for tc in c["choices"][0]["delta"].get("tool_calls") or ()
    )
    assert json.loads(args) == {"q": "x"} and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert stream.usage.completion_tokens > 0 and stream.usage.cost_usd > 0
    sent = loopback.requests_for(worker.model)
    assert len(sent) == 2 and sent[1].stream
    assert sent[0].body["max_tokens"] == 30
    if index == 0:  # as the client sent it
        assert sent[0].body["tools"] == [TOOL]
    else:  # translated by litellm into Anthropic's tool shape
        assert sent[0].body["tools"][0]["name"] == "lookup" and "input_schema" in sent[0].body["tools"][0]


@pytest.mark.parametrize("index", [0, 1], ids=["direct", "litellm"])
def test_retries_then_gives_up_with_a_provider_error(loopback: LoopbackServer, index: int) -> None:
    worker = _workers(loopback)[index]
    loopback.script(worker.model, [{"fault": 500}, {"fault": 429}, "third time"])
    forwarder = Forwarder(FAST)
    params = {"messages": [{"role": "user", "content": "hi"}]}
    body = through_calls(worker, lambda w: forwarder.complete(w, params), RETRY).body
    assert body["choices"][0]["message"]["content"] == "third time"
    loopback.script(worker.model, [{"fault": 503}] * 3)
    with pytest.raises(ProviderError) as failed:
        through_calls(worker, lambda w: forwarder.stream(w, params), RETRY)
    assert "after 3 attempts" in str(failed.value) and not isinstance(failed.value, RequestRejected)
    assert len(loopback.requests_for(worker.model)) == 6


def test_a_refusal_is_not_retried_and_names_the_parameter(loopback: LoopbackServer) -> None:
    worker = _workers(loopback)[0]
    loopback.script(worker.model, [{"fault": 400}])
    params = {"messages": [{"role": "user", "content": "hi"}], "seed": 1}
    with pytest.raises(RequestRejected):
        through_calls(worker, lambda w: Forwarder(FAST).complete(w, params), RETRY)
    assert len(loopback.requests_for(worker.model)) == 1


def test_streams_to_a_keep_alive_worker_share_one_connection() -> None:
    """A finished stream is read to its end, so its connection serves the next call (closing it after
    `[DONE]` made every call open a new one: a TCP, and with hosted workers a TLS, handshake per step)."""
    with LoopbackServer(keep_alive_streams=True) as server:
        worker = _workers(server)[0]
        server.script(worker.model, ["one", "two", "three"])
        forwarder = Forwarder(FAST)
        params = {"messages": [{"role": "user", "content": "hi"}]}
        whole = forwarder.complete(worker, params)
        streamed = list(forwarder.stream(worker, params))
        again = forwarder.complete(worker, params)
        ports = [r.client_port for r in server.requests_for(worker.model)]
    assert whole.body["choices"][0]["message"]["content"] == "one" and streamed
    assert again.body["choices"][0]["message"]["content"] == "three"
    assert len(ports) == 3 and len(set(ports)) == 1, ports


def test_the_event_loops_stream_relays_what_the_threads_does_and_keeps_or_closes_its_connection() -> None:
    """`astream` (serve's pass-through from its event loop): the same chunks and cost as `stream`; a stream
    read to its end leaves its connection for the next call, one left early closes it."""
    reply = {"content": None, "tool_calls": [{"id": "call_1", "name": "lookup", "arguments": {"q": "x"}}]}
    with LoopbackServer(keep_alive_streams=True) as server:
        worker = _workers(server)[0]
        slow = {"content": "one two three four", "chunk_size": 4, "chunk_delay_s": 0.2}
        server.script(worker.model, [reply, reply, reply, slow, "last"])
        forwarder = Forwarder(FAST)
        params = {"messages": [{"role": "user", "content": "find x"}], "tools": [TOOL]}
        threaded = forwarder.stream(worker, params)
        expected = list(threaded)

        async def calls() -> tuple[list[Any], list[Any], Any, list[Any]]:
            opened = await forwarder.astream(worker, params)
            chunks = [c async for c in opened]
            again = [c async for c in await forwarder.astream(worker, params)]
            left = await forwarder.astream(worker, params | {"messages": [{"role": "user", "content": "go"}]})
            async for _ in left:
                break  # the client went away after the first chunk
            await left.aclose()
            last = [c async for c in await forwarder.astream(worker, params)]
            await forwarder.adirect.close()
            return chunks, again, opened, last

        chunks, again, opened, last = asyncio.run(calls())
        ports = [r.client_port for r in server.requests_for(worker.model)]

    def shape(cs: list[Any]) -> list[Any]:
        return [[c["object"], c["choices"]] for c in cs]

    assert shape(chunks) == shape(expected) == shape(again) and len(chunks) > 1
    assert opened.usage == threaded.usage and opened.usage.cost_usd > 0
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in last) == "last"
    assert ports[1] == ports[2] == ports[3]  # the async calls: one kept-alive connection
    assert ports[4] != ports[3]  # the stream left early closed its connection
