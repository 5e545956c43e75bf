"""`fugu serve` at the HTTP level: the Responses API through the openai SDK, and raw requests (chunked bodies,
bad headers, foreign hosts and origins, non-JSON bodies, a browser's CORS preflight, keys)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import openai
import pytest

from tests.loopback import LoopbackServer
from tests.serve_kit import KEY, Serve, ask, pool_file, post

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _raw(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Sends bytes as they are; returns the status, headers (lower-case) and body of the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def _request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_responses_create_text_tools_and_stream(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", ["plain answer"])
    loopback.script(
        "alpha",
        [
            {
                "content": None,
                "tool_calls": [{"id": "call_7", "name": "get_weather", "arguments": {"city": "Lima"}}],
            }
        ],
    )
    loopback.script("alpha", ["Lima is warm."])
    loopback.script("alpha", [{"content": "streamed answer", "chunk_size": 4}])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)

    text = client.responses.create(model="fugu", instructions="Be brief.", input="hi", max_output_tokens=40)
    assert text.output_text == "plain answer" and text.status == "completed" and text.usage is not None
    sent = loopback.requests_for("alpha")[0].body
    assert sent["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert sent["max_tokens"] == 40

    called = client.responses.create(model="fugu", input="weather in Lima?", tools=[WEATHER])  # type: ignore[list-item]
    call = called.output[0]
    assert (
        call.type == "function_call"
        and call.call_id == "call_7"
        and json.loads(call.arguments) == {"city": "Lima"}
    )
    follow = client.responses.create(
        model="fugu",
        input=[
            {"role": "user", "content": "weather in Lima?"},
            {
                "type": "function_call",
                "call_id": "call_7",
                "name": "get_weather",
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": "call_7", "output": "warm"},
        ],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert follow.output_text == "Lima is warm."
    chat = loopback.requests_for("alpha")[2].body
    assert chat["tools"][0]["function"]["name"] == "get_weather"
    assert chat["messages"][1]["tool_calls"][0]["id"] == "call_7" and chat["messages"][2]["role"] == "tool"

    events = list(client.responses.create(model="fugu", input="stream it", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "streamed answer"
    assert events[-1].response.output_text == "streamed answer"  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_chunked_body_and_a_bad_content_length(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    body = json.dumps(ask("chunked hello")).encode()
    chunked = (
        b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in (body[:10], body[10:])) + b"0\r\n\r\n"
    )
    headers = {"Host": f"127.0.0.1:{server.port}", "Content-Type": "application/json"}
    status, _, reply = _raw(
        server.port,
        _request("POST", "/v1/chat/completions", headers | {"Transfer-Encoding": "chunked"}, chunked),
    )
    assert status == 200 and json.loads(reply)["choices"][0]["message"]["content"] == "done"
    status, _, _ = _raw(
        server.port, _request("POST", "/v1/chat/completions", headers | {"Content-Length": "abc"}, body)
    )
    assert status == 400
    status, _, reply = _raw(
        server.port, _request("POST", "/v1/chat/completions", headers | {"Content-Length": "5"}, b"{nope")
    )
    assert status == 400 and json.loads(reply)["error"]["code"] == "invalid_json"


def test_foreign_host_origin_and_content_type_are_refused(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    body = json.dumps(ask("hi")).encode()
    good = {
        "Host": f"127.0.0.1:{server.port}",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
    }
    cases = [
        (good | {"Host": f"evil.example:{server.port}"}, 403, "host_not_allowed"),  # DNS rebinding
        (good | {"Origin": "https://evil.example"}, 403, "origin_not_allowed"),  # a web page's fetch
        (good | {"Content-Type": "text/plain"}, 415, "unsupported_media_type"),  # an HTML form
    ]
    for headers, status, code in cases:
        got, _, reply = _raw(server.port, _request("POST", "/v1/chat/completions", headers, body))
        assert (got, json.loads(reply)["error"]["code"]) == (status, code)
    assert [r for r in loopback.requests if r.method == "POST"] == []
    for host in ("localhost", "127.0.0.1"):
        got, _, _ = _raw(
            server.port,
            _request("POST", "/v1/chat/completions", good | {"Host": f"{host}:{server.port}"}, body),
        )
        assert got == 200


def test_cors_preflight_and_call_from_an_allowed_origin(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    origin = "http://localhost:3000"
    server = serve(pool_file(tmp_path, loopback, "alpha"), cors_origins=(origin,), api_key=KEY)
    host = {"Host": f"127.0.0.1:{server.port}"}
    preflight = host | {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    status, headers, _ = _raw(server.port, _request("OPTIONS", "/v1/chat/completions", preflight))
    assert status == 204 and headers["access-control-allow-origin"] == origin
    assert "POST" in headers["access-control-allow-methods"]
    assert "authorization" in headers["access-control-allow-headers"]
    body = json.dumps(ask("hi")).encode()
    call = host | {"Origin": origin, "Content-Type": "application/json", "Content-Length": str(len(body))}
    status, headers, _ = _raw(
        server.port, _request("POST", "/v1/chat/completions", call | {"Authorization": f"Bearer {KEY}"}, body)
    )
    assert status == 200 and headers["access-control-allow-origin"] == origin
    assert "x-fugu-session" in headers["access-control-expose-headers"]
    status, _, _ = _raw(
        server.port,
        _request("OPTIONS", "/v1/chat/completions", preflight | {"Origin": "https://evil.example"}),
    )
    assert status == 403


def test_keys_errors_and_routes_in_openai_shape(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVE_KEY", KEY)
    server = serve(pool_file(tmp_path, loopback, "alpha"), api_key_env="MY_SERVE_KEY")
    for headers in ({}, {"Authorization": "Bearer nope"}):
        status, data, reply_headers = post(server.url, ask("hi"), headers)
        assert status == 401 and data["error"]["code"] == "invalid_api_key"
        assert reply_headers["WWW-Authenticate"] == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url, api_key="wrong").models.list()
    auth = {"Authorization": f"Bearer {KEY}"}
    status, data, _ = post(server.url, ask("hi"), auth, path="/no/such/route")
    assert status == 404 and set(data["error"]) == {"message", "type", "param", "code"}
    host = {"Host": f"127.0.0.1:{server.port}"} | auth
    status, _, reply = _raw(server.port, _request("DELETE", "/v1/models", host))
    assert status == 405 and "error" in json.loads(reply)
    status, headers, _ = _raw(server.port, _request("HEAD", "/v1/models", host))
    assert status == 200 and headers["content-type"] == "application/json"
    status, data, _ = post(server.url, ask("hi"), auth)
    assert status == 200 and data["choices"][0]["message"]["content"] == "done"


def test_two_hundred_connections_at_once_are_all_answered(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    import threading

    server = serve(pool_file(tmp_path, loopback, "alpha"))
    request = _request("GET", "/v1/models", {"Host": f"127.0.0.1:{server.port}"})
    statuses: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(200)

    def one() -> None:
        start.wait()
        try:
            statuses.append(_raw(server.port, request)[0])
        except OSError as e:  # a reset connection: what a listen backlog of 5 did
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [] and statuses == [200] * 200
