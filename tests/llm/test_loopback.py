"""The loopback provider run as a script, as a human or a pexpect-driven REPL test would use it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.loopback import LoopbackServer


def _reply_text(url: str, body: Any) -> str:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return str(json.loads(resp.read())["choices"][0]["message"]["content"])


def test_runs_as_a_script_with_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps({"test-model": ["scripted hello"]}))
    proc = subprocess.Popen(
        [sys.executable, "tests/loopback.py", "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        base = line.strip().rsplit(" ", 1)[-1]
        assert base.startswith("http://127.0.0.1:") and base.endswith("/v1")
        body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}
        assert _reply_text(f"{base}/chat/completions", body) == "scripted hello"
        assert _reply_text(f"{base}/chat/completions", body) == "done"
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


def test_factory_servers_are_independent(loopback_factory: Callable[[], LoopbackServer]) -> None:
    one, two = loopback_factory(), loopback_factory()
    one.script("m", ["from one"])
    body = {"model": "m", "messages": []}
    assert _reply_text(f"{two.base_url}/chat/completions", body) == "done"
    assert _reply_text(f"{one.base_url}/chat/completions", body) == "from one"
    assert len(one.requests) == len(two.requests) == 1


def test_keep_alive_streams_are_chunked_on_one_connection() -> None:
    import http.client

    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for keep in (True, False):
        with LoopbackServer(default_reply="streamed hello", keep_alive_streams=keep) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            texts, sockets = [], set()
            for _ in range(2):
                conn.request(
                    "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
                )
                reply = conn.getresponse()
                assert (reply.getheader("Transfer-Encoding") == "chunked") is keep
                raw = reply.read().decode()
                sockets.add(None if conn.sock is None else id(conn.sock))  # None: closed by the server
                chunks = [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]
                texts.append(
                    "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
                )
                assert raw.rstrip().endswith("data: [DONE]")
            conn.close()
            assert texts == ["streamed hello"] * 2
            assert (len(sockets) == 1 and None not in sockets) is keep  # kept alive, or closed after each
