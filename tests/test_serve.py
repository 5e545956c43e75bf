"""`fugu serve`'s agent models (fugu-agent, fugu-ultra, fugu/<worker>) end to end: litellm's client and plain
HTTP against it, its workers on loopback servers."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.serve import FuguServer
from tests.helpers import BUGGY, call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.serve_kit import KEY, ask, no_retries, pool_file, post

AGENT = "fugu-agent"


def test_litellm_client_gets_the_answer_plain_and_streamed(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    import litellm

    loopback.script("alpha", [tool_reply(call("read_file", path="calc.py")), "add() subtracts.", "It is 4."])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"), api_key=KEY)
    reply = litellm.completion(
        model="openai/fugu-agent",
        api_base=server.url,
        api_key=KEY,
        messages=[{"role": "user", "content": "what is wrong in calc.py?"}],
    )
    assert reply.choices[0].message.content == "add() subtracts."
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
    sent = loopback.requests_for("alpha")
    assert len(sent) == 2 and "a - b" in sent[1].messages[-1]["content"]  # the tool really ran in the repo

    chunks = litellm.completion(
        model="openai/fugu-agent",
        api_base=server.url,
        api_key=KEY,
        messages=[{"role": "user", "content": "2+2?"}],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "It is 4."
    assert loopback.requests_for("alpha")[-1].stream  # the worker's reply was streamed through


def test_plain_http_reply_carries_route_decisions_and_fugu_fields(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("alpha", [tool_reply(call("glob", pattern="*.py")), "two python files"])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    status, data, headers = post(server.url, ask("list the python files", AGENT))
    assert status == 200, data
    assert data["object"] == "chat.completion" and data["model"] == AGENT
    assert data["choices"][0] == {
        "index": 0,
        "message": {"role": "assistant", "content": "two python files"},
        "logprobs": None,
        "finish_reason": "stop",
    }
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    fugu = data["fugu"]
    assert fugu["status"] == "success" and headers["X-Fugu-Session"] == fugu["session_id"]
    assert [(s["step"], s["worker"], s["source"]) for s in fugu["steps"]] == [
        (1, "alpha", "prior"),
        (2, "alpha", "prior"),
    ]
    assert 0.5 < fugu["steps"][0]["p"] <= 1.0  # alpha has the higher priority
    assert fugu["workers"] == {"alpha": {"steps": 2, "cost_usd": pytest.approx(fugu["total_cost_usd"])}}
    assert fugu["total_cost_usd"] > 0


def test_streamed_route_events_text_and_done(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("beta", [{"content": "streamed answer", "chunk_size": 3}])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    status, events, _ = post(
        server.url, ask("hello", "fugu/beta", stream=True, stream_options={"include_usage": True})
    )
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    routes = [c["fugu"] for c in chunks if c.get("fugu", {}).get("subtype") == "route"]
    assert [(r["worker"], r["source"]) for r in routes] == [("beta", "override")]
    finish = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    events_only = [c for c in chunks if "fugu" in c and c is not finish and c["choices"]]
    assert events_only and all(c["choices"][0]["delta"] == {"content": ""} for c in events_only)
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"] and "fugu" not in c]
    assert "".join(p or "" for p in pieces) == "streamed answer" and len([p for p in pieces if p]) > 1
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert finish["fugu"]["workers"] == {
        "beta": {"steps": 1, "cost_usd": pytest.approx(finish["fugu"]["total_cost_usd"])}
    }
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert loopback.requests_for("alpha") == []  # the forced worker did the work


def test_model_list_unknown_model_and_unknown_worker(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    with urllib.request.urlopen(server.url + "/models", timeout=10) as reply:
        ids = [m["id"] for m in json.load(reply)["data"]]
    assert ids == ["fugu", "fugu-agent", "fugu-ultra", "fugu/alpha", "fugu/beta"]
    for model in ("gpt-4o", "fugu/gamma"):
        status, data, _ = post(server.url, ask("hi", model=model))
        assert status == 404, data
        assert data["error"]["code"] == "model_not_found" and model in data["error"]["message"]
    status, data, _ = post(server.url, {"model": AGENT, "messages": [{"role": "system", "content": "x"}]})
    assert status == 400 and data["error"]["type"] == "invalid_request_error"
    for param, value in (("temperature", 0.2), ("max_tokens", 10), ("n", 2), ("seed", 1)):
        status, data, _ = post(server.url, ask("hi", AGENT, **{param: value}))
        assert status == 400 and data["error"]["param"] == param, data
    assert loopback.requests_for("alpha") == []


def test_wrong_or_missing_key_is_refused_with_401(
    tmp_path: Path,
    loopback: LoopbackServer,
    serve: Callable[..., FuguServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FUGU_SERVE_KEY", KEY)
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    for headers in ({}, {"Authorization": "Bearer nope"}):
        status, data, reply_headers = post(server.url, ask("hi"), headers)
        assert status == 401 and data["error"]["code"] == "invalid_api_key"
        assert reply_headers["WWW-Authenticate"] == "Bearer"
    models = urllib.request.Request(server.url + "/models", headers={"Authorization": "Bearer nope"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(models, timeout=10)
    assert refused.value.code == 401
    assert loopback.requests == []  # refused before any session or worker was touched
    status, data, _ = post(server.url, ask("hi", AGENT), {"Authorization": f"Bearer {KEY}"})
    assert status == 200 and data["choices"][0]["message"]["content"] == "done"


def test_no_usable_worker_is_503_and_a_failed_turn_is_502_not_to_retry(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    keyed = write_pool(
        tmp_path / "keyed.toml", [{"name": "k", "model": "openai/k", "api_key_env": "NOPE_KEY"}]
    )
    server = serve(keyed)
    status, data, _ = post(server.url, ask("hi", AGENT))
    assert status == 503 and data["error"]["code"] == "no_usable_worker"
    assert "NOPE_KEY is not set" in data["error"]["message"]

    no_retries()
    loopback.script("alpha", [{"fault": 500}])
    failing = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, headers = post(failing.url, ask("hi", AGENT))
    assert status == 502 and data["error"]["type"] == "server_error" and headers["x-should-retry"] == "false"
    assert "alpha" in data["error"]["message"] and data["fugu"]["status"] == "error_during_execution"


def test_sessions_continue_by_issued_id_or_by_conversation_never_by_user(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("alpha", ["noted 42", "you said 42", "fresh", "seeded", "by prefix"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, first, headers = post(server.url, ask("remember 42", AGENT, user="alice"))
    sid = headers["X-Fugu-Session"]
    second = post(server.url, ask("what did I say?", AGENT), {"X-Fugu-Session": sid})[1]
    assert second["choices"][0]["message"]["content"] == "you said 42"
    assert first["fugu"]["session_id"] == second["fugu"]["session_id"] == sid
    seen = [m["content"] for m in loopback.requests_for("alpha")[1].messages if m["role"] != "system"]
    assert seen == ["remember 42", "noted 42", "what did I say?"]

    third = post(server.url, ask("and now?", AGENT, user="alice"))[1]  # `user` is no key: a new session
    assert third["fugu"]["session_id"] != sid
    fresh = _without_map(loopback.requests_for("alpha")[2].messages)
    assert [m["role"] for m in fresh] == ["system", "user"]
    status, data, _ = post(server.url, ask("hi", AGENT), {"X-Fugu-Session": "alice"})
    assert status == 404 and data["error"]["code"] == "session_not_found"

    history = [
        {"role": "system", "content": "Answer tersely."},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "hi Ada"},
        {"role": "user", "content": "my name?"},
    ]
    seeded = post(server.url, {"model": AGENT, "messages": history})[1]
    sent = _without_map(loopback.requests_for("alpha")[3].messages)
    assert [m["role"] for m in sent] == ["system", "system", "user", "assistant", "user"]
    assert "Answer tersely." in sent[1]["content"] and sent[2:] == [
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "hi Ada"},
        {"role": "user", "content": "my name?"},
    ]
    # a chat client resending the whole conversation continues the session that gave the last answer
    history += [{"role": "assistant", "content": "seeded"}, {"role": "user", "content": "and?"}]
    later = post(server.url, {"model": AGENT, "messages": history})[1]
    assert later["fugu"]["session_id"] == seeded["fugu"]["session_id"]
    # every session (and the pass-through) asks one router: a learned one is loaded once per server
    routers = {id(s.deps.router) for s in server.hub.agents().live} | {id(server.hub.passthrough().router)}
    assert len(server.hub.agents().live) == 3 and len(routers) == 1
    assert [m["content"] for m in _without_map(loopback.requests_for("alpha")[4].messages)][-3:] == [
        "my name?",
        "seeded",
        "and?",
    ]


def test_read_only_by_default_refuses_edits(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script(
        "alpha",
        [tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")), "could not edit"],
    )
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    status, data, _ = post(server.url, ask("fix calc.py", AGENT))
    assert status == 200 and len(data["fugu"]["permission_denials"]) == 1
    assert (tmp_path / "repo" / "calc.py").read_text() == BUGGY


def test_ultra_model_streams_the_workflow(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    plan = {"steps": [{"worker": "beta", "subtask": "Say what calc.py does.", "access": []}]}
    loopback.script("alpha", [json.dumps(plan)])
    loopback.script("beta", ["BETA: calc.py adds, wrongly."])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    status, events, _ = post(server.url, ask("explain calc.py", model="fugu-ultra", stream=True))
    assert status == 200 and events[-1] == "[DONE]"
    fugu = [c["fugu"] for c in events[:-1] if "fugu" in c]
    workflow = next(f for f in fugu if f.get("subtype") == "workflow")
    assert [s["worker"] for s in workflow["steps"]] == ["beta"]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in events[:-1] if c["choices"])
    assert "BETA: calc.py adds, wrongly." in text
    assert fugu[-1]["status"] == "success" and "beta" in fugu[-1]["workers"]


def test_client_disconnect_cancels_the_turn(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("alpha", [{"content": "too late", "delay_s": 30}, "next one"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    body = json.dumps(ask("slow", AGENT, stream=True)).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        seen = b""
        while b'"subtype":"route"' not in seen:
            seen += sock.recv(4096)
        while not loopback.requests_for("alpha"):  # the worker is at work on the slow reply
            time.sleep(0.05)
    db = Path(os.environ["FUGU_HOME"]) / "fugu.db"
    deadline = time.monotonic() + 10
    status = None
    while time.monotonic() < deadline and status != "interrupted":
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT status FROM turns").fetchone()
        status = row[0] if row else None
        time.sleep(0.1)
    assert status == "interrupted"
    reply = post(server.url, ask("quick", AGENT))[1]  # the session's lock was released
    assert reply["choices"][0]["message"]["content"] == "next one"


def test_real_process_prints_its_address_and_stops_on_sigterm(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = pool_file(tmp_path, loopback, "alpha")
    loopback.script("alpha", ["from a real server"])
    code = (
        "import sys; from fugu_cli.serve import main, ServeOptions; from fugu_cli.options import RunOptions;"
        f"sys.exit(main(ServeOptions(run=RunOptions(pool={str(pool)!r}), port=0)))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("fugu serve: listening on http://127.0.0.1:") and str(repo) in line
        url = line.split()[4]
        status, data, _ = post(url, ask("hi", AGENT))
        assert status == 200 and data["choices"][0]["message"]["content"] == "from a real server"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_step_limit_is_a_truncated_answer(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("alpha", [tool_reply(call("glob", pattern="*.py"))] * 3)
    server = serve(pool_file(tmp_path, loopback, "alpha"), max_turns=2)
    status, data, _ = post(server.url, ask("loop", AGENT))
    assert status == 200 and data["choices"][0]["finish_reason"] == "length"
    assert data["fugu"]["status"] == "error_max_turns" and len(data["fugu"]["steps"]) == 2


def _two_at_once(url: str, loopback: LoopbackServer) -> list[str]:
    loopback.script("alpha", [{"content": "one", "delay_s": 0.5}, {"content": "two", "delay_s": 0.5}])
    answers: list[str] = []
    clients = [
        threading.Thread(target=lambda t=t: answers.append(post(url, ask(t, AGENT))[1]["fugu"]["session_id"]))
        for t in ("go", "run")
    ]
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=30)
    return answers


def test_read_only_sessions_run_at_once_and_writing_ones_take_turns_on_the_tree(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    reader = serve(pool_file(tmp_path, loopback, "alpha"))
    assert len(set(_two_at_once(reader.url, loopback))) == 2  # two sessions...
    first, second = sorted(loopback.requests_for("alpha"), key=lambda r: r.arrived)
    assert first.finished is not None and second.arrived < first.finished  # ...at the same time
    reader.stop()

    writer = serve(pool_file(tmp_path, loopback, "alpha"), permission_mode="auto-edit")
    assert len(set(_two_at_once(writer.url, loopback))) == 2
    first, second = sorted(loopback.requests_for("alpha")[2:], key=lambda r: r.arrived)
    assert first.finished is not None and second.arrived >= first.finished  # one turn at a time on the tree


def test_a_fugu_session_id_resumes_the_session_after_a_restart(
    tmp_path: Path, loopback: LoopbackServer, serve: Callable[..., FuguServer]
) -> None:
    loopback.script("alpha", ["noted 7", "it was 7"])
    pool = pool_file(tmp_path, loopback, "alpha")
    first = serve(pool)
    sid = post(first.url, ask("remember 7", AGENT))[1]["fugu"]["session_id"]
    first.stop()
    second = serve(pool)
    reply = post(second.url, ask("which number?", AGENT, session_id=sid))[1]
    assert reply["fugu"]["session_id"] == sid
    seen = [m["content"] for m in loopback.requests_for("alpha")[1].messages if m["role"] != "system"]
    assert seen == ["remember 7", "noted 7", "which number?"]


def _without_map(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request less the repo map fugu gives each turn (a system message before the turn's message)."""
    return [m for m in messages if not str(m.get("content") or "").startswith("Repository map")]
