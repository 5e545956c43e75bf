"""Issue 22, item 9: `fugu serve` against a body nested 100,000 deep and against slowloris clients (a raw
socket that sends part of a request and stalls). A real in-process server on 127.0.0.1; the timeouts are
set short here, and the only bound on time is the client socket's generous ceiling."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.serve import FuguServer
from tests.loopback import LoopbackServer
from tests.serve_kit import Serve, pool_file

CEILING_S = 60.0  # the client gives up here: a server that never closes the connection fails the test
HEAD = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture
def server(tmp_path: Path, loopback: LoopbackServer, serve: Serve) -> FuguServer:
    return serve(pool_file(tmp_path, loopback, "alpha"), header_timeout_s=1.0, body_timeout_s=1.0)


def _until_closed(port: int, *sends: bytes) -> bytes:
    """Send, then read until the server closes the connection (socket.timeout past the ceiling fails)."""
    with socket.create_connection(("127.0.0.1", port), timeout=CEILING_S) as sock:
        for data in sends:
            sock.sendall(data)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got


def _status_and_body(reply: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def _post(body: bytes) -> bytes:
    return f"{HEAD}Connection: close\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.mark.parametrize("depth", [100_000, 150])
def test_json_nested_too_deep_is_a_400_not_a_500(server: FuguServer, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    body = f'{{"model": "fugu", "messages": [{{"role": "user", "content": "hi"}}], "x": {nested}}}'.encode()
    status, error = _status_and_body(_until_closed(server.port, _post(body)))
    assert status == 400, error
    assert error["error"]["code"] == "invalid_json" and "nested deeper than 100" in error["error"]["message"]
    status, _ = _status_and_body(_until_closed(server.port, _post(b'{"model": "fugu"}')))
    assert status == 400  # the server still answers (a request with no messages)


def test_the_depth_limit_counts_lists_and_objects_alike_and_only_containers() -> None:
    from fugu_cli.serve.routes import _deeper_than

    def nest(levels: int) -> object:
        value: object = "leaf"
        for i in range(levels):
            value = {"k": value, "n": 1} if i % 2 else ["s", value]
        return value

    assert not _deeper_than(nest(3), 3) and _deeper_than(nest(4), 3)
    assert not _deeper_than(nest(100), 100) and _deeper_than(nest(101), 100)
    assert not _deeper_than("a string", 0) and not _deeper_than([["x"] * 1000] * 1000, 2)


def test_a_stalled_request_head_is_closed(server: FuguServer) -> None:
    reply = _until_closed(server.port, HEAD.encode() + b"X-Slow: a")
    assert reply.startswith(b"HTTP/1.1 408")


def test_a_connection_that_sends_nothing_is_closed(server: FuguServer) -> None:
    assert _until_closed(server.port).startswith(b"HTTP/1.1 408")


def test_a_stalled_body_is_a_408_and_closed(server: FuguServer) -> None:
    stalled = f"{HEAD}Content-Length: 1000\r\n\r\n".encode() + b'{"model": "fugu", "mess'
    status, error = _status_and_body(_until_closed(server.port, stalled))
    assert status == 408 and error["error"]["code"] == "request_timeout"


def test_the_next_request_on_a_kept_alive_connection_is_timed_too(server: FuguServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=CEILING_S) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = b""
        while b"\r\n\r\n" not in first or len(first.partition(b"\r\n\r\n")[2]) < _length(first):
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /v1/mod")  # the next request's head, stalled
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert rest.startswith(b"HTTP/1.1 408")


def _length(reply: bytes) -> int:
    head = reply.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    return int(head.split("content-length:", 1)[1].split("\r\n", 1)[0]) if "content-length:" in head else 0
