"""The pass-through's whole replies served from the event loop (`PassThrough.acomplete`, the path `fugu serve`
takes once its router is loaded, with the prior router and OpenAI-compatible workers): the same retries,
failover, first-byte limit, cancellation and ledger rows as the worker-thread path, through the openai SDK
against loopback workers."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import httpx
import openai
import pytest

from fugu_cli.serve import FuguServer
from fugu_cli.serve.params import ChatRequest, parse_chat
from fugu_cli.serve.passthrough import PassThrough
from tests.loopback import LoopbackServer, SilentServer
from tests.serve_kit import KEY, Serve, ask, pool_file, rows


def _loop_server(serve: Serve, pool: Path) -> tuple[FuguServer, PassThrough]:
    """A server whose pass-through is made, as `fugu serve` makes it right after it starts listening."""
    server = serve(pool)
    passthrough = server.hub.passthrough()
    assert passthrough.in_loop(_request())
    return server, passthrough


def _request() -> ChatRequest:
    return parse_chat(ask("hi"))


def _client(url: str, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0, **kw)  # type: ignore[arg-type]


def _config(text: str) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(text)


def test_retries_honour_retry_after_then_failover_then_all_failed(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    _config("[llm]\nmax_retries = 1\n")
    loopback.script("alpha", [{"fault": 429, "retry_after": 0.4}, {"fault": 500}])
    loopback.script("beta", ["beta saved it", {"fault": 400}])
    server, passthrough = _loop_server(serve, pool_file(tmp_path, loopback, "alpha", "beta"))
    client = _client(server.url)

    saved = client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "hi"}])
    assert saved.choices[0].message.content == "beta saved it"
    assert saved.model_extra is not None
    fugu = saved.model_extra["fugu"]
    assert fugu["failed"] == ["alpha"] and fugu["source"] == "fallback" and fugu["worker"] == "beta"
    posts = [r for r in loopback.requests if r.method == "POST"]
    assert [r.model for r in posts] == ["alpha", "alpha", "beta"]
    assert posts[1].arrived - posts[0].finished >= 0.35  # type: ignore[operator]  # Retry-After honoured

    with pytest.raises(openai.APIStatusError) as failed:  # alpha cools down; beta refuses the request
        client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "again"}])
    assert failed.value.status_code == 502 and failed.value.response.headers["x-should-retry"] == "false"
    assert "alpha cooling down" in failed.value.message and "beta" in failed.value.message
    assert "(after 2 attempts)" in failed.value.message  # alpha's retry, as the worker-thread path words it
    assert passthrough.served_in_loop == 2
    statuses = [s for (s,) in rows("SELECT status FROM steps ORDER BY rowid")]
    assert statuses == ["provider_error", "provider_error", "ok", "provider_error"]
    routes = rows("SELECT worker, source FROM route_decisions ORDER BY rowid")
    assert routes[:2] == [("alpha", "prior"), ("beta", "fallback")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_silent_worker_is_cut_at_the_first_byte_limit_and_the_other_answers(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve, stream: bool
) -> None:
    _config("[llm]\nmax_retries = 2\nfirst_byte_timeout_s = 0.5\n")
    silent = SilentServer()
    try:
        pool = pool_file(tmp_path, loopback, "alpha", "beta")
        pool.write_text(pool.read_text().replace(loopback.base_url, silent.base_url, 1))  # alpha is silent
        server, passthrough = _loop_server(serve, pool)
        start = time.monotonic()
        asked = {"model": "fugu", "messages": [{"role": "user", "content": "hi"}]}
        client = _client(server.url, timeout=30)
        if stream:
            chunks = list(client.chat.completions.create(**asked, stream=True))  # type: ignore[call-overload]
            text, reply = "".join(c.choices[0].delta.content or "" for c in chunks), chunks[0]
        else:
            reply = client.chat.completions.create(**asked)  # type: ignore[call-overload]
            text = reply.choices[0].message.content
        took = time.monotonic() - start
    finally:
        silent.close()
    assert text and reply.model_extra is not None
    assert reply.model_extra["fugu"]["worker"] == "beta" and reply.model_extra["fugu"]["failed"] == ["alpha"]
    assert 0.5 <= took < 5.0 and silent.posts == 1  # cut once, not retried (silence is not retried)
    (text,) = [t for (s, t) in rows("SELECT status, text FROM steps ORDER BY rowid") if s == "provider_error"]
    assert "sent nothing for 0.5 s" in text
    assert passthrough.served_in_loop == 1


def test_a_client_that_leaves_cuts_the_call_and_leaves_an_interrupted_row(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [{"content": "too late", "delay_s": 5}, "next"])
    server, passthrough = _loop_server(serve, pool_file(tmp_path, loopback, "alpha"))
    with pytest.raises(openai.APITimeoutError):
        _client(server.url, timeout=0.5).chat.completions.create(
            model="fugu", messages=[{"role": "user", "content": "hi"}]
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not rows("SELECT 1 FROM steps WHERE status = 'interrupted'"):
        time.sleep(0.05)
    assert rows("SELECT status FROM steps ORDER BY rowid") == [("interrupted",)]
    # the server goes on serving: the next call is answered at once, not after the first one's 5 s
    start = time.monotonic()
    reply = _client(server.url).chat.completions.create(
        model="fugu", messages=[{"role": "user", "content": "again"}]
    )
    assert reply.choices[0].message.content == "next" and time.monotonic() - start < 3.0
    assert passthrough.served_in_loop == 2


def test_the_loop_and_the_worker_thread_leave_the_same_rows(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    """The first call of an in-process server goes through a worker thread (its pass-through is not made
    yet); the second, made the same way, is served from the loop: the same reply shape and ledger rows."""
    loopback.script("alpha", ["one", "two"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = _client(server.url)
    first = client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "a"}])
    passthrough = server.hub.made_passthrough()
    assert passthrough is not None and passthrough.served_in_loop == 0
    second = client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "b"}])
    assert passthrough.served_in_loop == 1
    assert first.model_extra is not None and second.model_extra is not None
    a, b = first.model_extra["fugu"], second.model_extra["fugu"]
    assert set(a) == set(b) and a["worker"] == b["worker"] == "alpha" and a["cost_usd"] == b["cost_usd"]
    assert (first.usage, first.choices[0].finish_reason) == (second.usage, second.choices[0].finish_reason)
    steps = rows("SELECT session_id, turn, step, worker, status, text FROM steps ORDER BY rowid")
    assert [s[1:] for s in steps] == [(1, 1, "alpha", "ok", "one"), (1, 1, "alpha", "ok", "two")]
    assert [s for (s,) in rows("SELECT source FROM route_decisions ORDER BY rowid")] == ["prior", "prior"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_reply_does_not_wait_for_its_rows(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve, stream: bool
) -> None:
    """Served from the loop, a call's rows are written once its reply is sent (a stream's: once its last
    byte is): another process holding the store's write lock (a REPL, `fugu sessions prune`) delays the
    rows, not the reply. Before, the reply waited for the lock (SQLite's busy timeout: 30 s). The event loop
    still waits for it after the reply, as it did before: the rows are written in the loop, so that the
    conversation's next call finds them."""
    loopback.script("alpha", ["one", "two"])
    server, passthrough = _loop_server(serve, pool_file(tmp_path, loopback, "alpha"))
    client = _client(server.url, timeout=10)
    first = client.chat.completions.create(model="fugu", messages=[{"role": "user", "content": "a"}])
    assert rows("SELECT status FROM steps") == [("ok",)]
    other = sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held
    try:
        start = time.monotonic()
        asked = {"model": "fugu", "messages": [{"role": "user", "content": "b"}]}
        if stream:
            chunks = list(client.chat.completions.create(**asked, stream=True))  # type: ignore[call-overload]
            assert "".join(c.choices[0].delta.content or "" for c in chunks) == "two"
            second = chunks[0]
        else:
            second = client.chat.completions.create(**asked)  # type: ignore[call-overload]
            assert second.choices[0].message.content == "two"
        assert time.monotonic() - start < 5
        time.sleep(0.2)
        assert passthrough.unwritten == 1  # waiting for the lock
        assert other.execute("SELECT count(*) FROM steps").fetchone() == (1,)
    finally:
        other.execute("COMMIT")
        other.close()
    assert first.model_extra is not None and second.model_extra is not None
    sessions = [first.model_extra["fugu"]["session_id"], second.model_extra["fugu"]["session_id"]]
    assert rows("SELECT session_id, status, text FROM steps ORDER BY rowid") == [
        (sessions[0], "ok", "one"),
        (sessions[1], "ok", "two"),
    ]
    assert rows("SELECT count(*) FROM route_decisions") == [(2,)] and passthrough.unwritten == 0


def test_a_stream_from_the_loop_fails_over_before_its_first_chunk_and_relays_the_rest(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    _config("[llm]\nmax_retries = 0\n")
    loopback.script("alpha", [{"fault": 500}])
    loopback.script("beta", [{"content": "streamed from the loop", "chunk_size": 4}])
    server, passthrough = _loop_server(serve, pool_file(tmp_path, loopback, "alpha", "beta"))
    chunks = list(
        _client(server.url).chat.completions.create(
            model="fugu",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert passthrough.served_in_loop == 1 and len(chunks) > 3  # relayed chunk by chunk
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "streamed from the loop"
    assert chunks[0].model_extra is not None and chunks[-1].model_extra is not None
    assert chunks[0].model_extra["fugu"]["worker"] == "beta" and chunks[0].model_extra["fugu"]["failed"] == [
        "alpha"
    ]
    assert (
        chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    )
    assert chunks[-1].model_extra["fugu"]["cost_usd"] > 0
    assert rows("SELECT worker, status, text FROM steps ORDER BY rowid") == [
        ("alpha", "provider_error", rows("SELECT text FROM steps ORDER BY rowid")[0][0]),
        ("beta", "ok", "streamed from the loop"),
    ]
    assert [w for (w,) in rows("SELECT worker FROM route_decisions ORDER BY rowid")] == ["alpha", "beta"]


def test_a_stream_from_the_loop_whose_client_leaves_is_cut_and_leaves_an_interrupted_row(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    """The client reads the first chunk and hangs up: fugu stops reading from the worker (its connection is
    closed: the worker's next write fails), the step is recorded as interrupted with what was relayed, and
    the server goes on serving."""
    loopback.script(
        "alpha", [{"content": "one two three four five six", "chunk_size": 4, "chunk_delay_s": 0.3}]
    )
    loopback.script("alpha", ["next"])
    server, passthrough = _loop_server(serve, pool_file(tmp_path, loopback, "alpha"))
    with httpx.stream(
        "POST",
        server.url + "/chat/completions",
        json={"model": "fugu", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=10,
    ) as response:
        texts = (
            json.loads(line[6:])["choices"][0]["delta"].get("content")
            for line in response.iter_lines()
            if line.startswith("data: ")
        )
        first = next(t for t in texts if t)  # after the role's chunk
    assert first == "one "
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not rows("SELECT 1 FROM steps WHERE status = 'interrupted'"):
        time.sleep(0.05)
    ((status, text),) = rows("SELECT status, text FROM steps")
    assert status == "interrupted" and text.startswith("one ") and "six" not in text
    (post,) = [r for r in loopback.requests if r.method == "POST"]
    while time.monotonic() < deadline and post.status is None:
        time.sleep(0.05)
    assert post.status == 499  # the worker's write failed: fugu closed the connection
    reply = _client(server.url).chat.completions.create(
        model="fugu", messages=[{"role": "user", "content": "again"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in reply) == "next"
    assert passthrough.served_in_loop == 2


def test_a_worker_that_dies_mid_stream_ends_the_stream_with_an_error_on_both_paths(
    tmp_path: Path, serve: Serve
) -> None:
    """The worker drops its connection after a few chunks: too late to fail over, so the client gets the
    chunks it was sent, then an error event in OpenAI's shape (no `[DONE]`), and the step is recorded as a
    provider error with the text relayed. The first call goes through the worker threads (the pass-through
    is not made yet), the second through the event loop: the same."""
    broken = {"content": "one two three four five six", "chunk_size": 4, "break_after": 3}
    with LoopbackServer(keep_alive_streams=True) as worker:
        worker.script("alpha", [broken, broken])
        server = serve(pool_file(tmp_path, worker, "alpha"))
        seen = []
        for task in ("a", "b"):
            with httpx.stream(
                "POST",
                server.url + "/chat/completions",
                json={"model": "fugu", "messages": [{"role": "user", "content": task}], "stream": True},
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=10,
            ) as response:
                seen.append([json.loads(x[6:]) for x in response.iter_lines() if x.startswith("data: {")])
        passthrough = server.hub.made_passthrough()
    assert passthrough is not None and passthrough.served_in_loop == 1
    for events in seen:
        *chunks, error = events
        assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "one two "
        assert "stream broke" in error["error"]["message"]
    steps = rows("SELECT status, text FROM steps ORDER BY rowid")
    assert steps == [("provider_error", "one two"), ("provider_error", "one two")]
