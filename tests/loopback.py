"""Loopback provider: a real HTTP server on 127.0.0.1 speaking OpenAI chat-completions and Anthropic messages.

Replies are scripted per model name (text, tool calls, faults); every request is recorded for assertions.
Used by tests through the `loopback` / `loopback_factory` fixtures, and by humans as a script:
`python tests/loopback.py --port 8765 --script replies.json` (the JSON maps model name -> list of replies).
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

import pytest

Reply = str | dict[str, Any]
HIDDEN_HEADERS = {"authorization", "x-api-key", "api-key"}
DEFAULT_REPLY: dict[str, Any] = {"content": "done"}


@dataclass
class RecordedRequest:
    """One request as the server saw it: auth headers removed, only the key's last 4 characters kept."""

    method: str
    path: str
    model: str | None
    body: Any
    headers: dict[str, str]
    arrived: float
    finished: float | None = None
    status: int | None = None
    reply: dict[str, Any] = field(default_factory=dict)
    key_tail: str | None = None
    client_port: int | None = None  # the client's end of the connection the request came on

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", [])) if isinstance(self.body, dict) else []

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


def _normalize(reply: Reply) -> dict[str, Any]:
    if isinstance(reply, str):
        return {"content": reply}
    if isinstance(reply, int):
        return {"fault": reply}
    return dict(reply)


def _arguments_text(call: dict[str, Any]) -> str:
    args = call.get("arguments", {})
    return args if isinstance(args, str) else json.dumps(args)


def _usage(reply: dict[str, Any], body: Any) -> tuple[int, int, int]:
    usage = reply.get("usage") or {}
    prompt = int(usage.get("prompt_tokens", 10 + len(json.dumps(body)) // 40))
    completion = int(usage.get("completion_tokens", 5 + len(reply.get("content") or "") // 4))
    return prompt, completion, int(usage.get("cached_tokens", 0))


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


class _Listener(ThreadingHTTPServer):
    request_queue_size = 256  # the default 5 resets connections when dozens of clients connect at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionResetError):
            return  # a client that kept its connection alive went away: nothing to report
        super().handle_error(request, client_address)


class RawServer:
    """A real TCP listener on loopback that answers each request (its head and content-length body) with the
    bytes `answer(request)` gives: None sends nothing, a list sends its pieces a moment apart (each in a read
    of its own). The connection is then closed if `close_after`, else it waits for the next request. For
    what the loopback provider does not send: compressed, malformed, cut short, silent."""

    def __init__(
        self, answer: Callable[[bytes], bytes | list[bytes] | None], close_after: bool = False
    ) -> None:
        self.answer = answer
        self.close_after = close_after
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.connections = 0
        self.requests: list[bytes] = []
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._held.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                sizes = [
                    line.split(b":", 1)[1] for line in lines if line.lower().startswith(b"content-length:")
                ]
                length = int(sizes[0]) if sizes else 0
                while len(buf) < length:
                    buf += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + buf[:length])
                buf = buf[length:]
                reply = self.answer(self.requests[-1])
                for i, piece in enumerate([reply] if isinstance(reply, bytes) else reply or []):
                    time.sleep(0.1 if i else 0)
                    conn.sendall(piece)
                if self.close_after:
                    conn.close()
                    return
        except OSError:
            return

    @property
    def request_lines(self) -> list[str]:
        """e.g. "POST /v1/chat/completions HTTP/1.1", one a request."""
        return [r.split(b"\r\n", 1)[0].decode("latin-1") for r in list(self.requests)]

    @property
    def posts(self) -> int:
        return sum(1 for line in self.request_lines if line.startswith("POST "))

    def close_connections(self) -> None:
        """Close every connection from the server's side (as a keep-alive timeout does)."""
        for conn in self._held:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.close_connections()


class SilentServer(RawServer):
    """Accepts every connection, reads the request and never answers: a provider hung after `accept`."""

    def __init__(self) -> None:
        super().__init__(lambda _: None)


class LoopbackServer:
    """A ThreadingHTTPServer in a background thread, on an ephemeral port unless one is given."""

    def __init__(
        self, port: int = 0, default_reply: Reply | None = None, *, keep_alive_streams: bool = False
    ) -> None:
        """`keep_alive_streams`: streamed replies are sent in chunked transfer encoding on a connection kept
        open for the next request, as hosted providers send them (by default a stream ends by closing
        its connection, so every streamed call opens a new one)."""
        self.keep_alive_streams = keep_alive_streams
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.default_reply = _normalize(default_reply if default_reply is not None else DEFAULT_REPLY)
        self.requests: list[RecordedRequest] = []
        self._httpd = _Listener(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style api_base (ends in /v1)."""
        return f"{self.url}/v1"

    def start(self) -> Self:
        serve = functools.partial(self._httpd.serve_forever, poll_interval=0.05)
        self._thread = threading.Thread(target=serve, name="loopback", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, model: str, replies: Sequence[Reply]) -> None:
        """Queue replies for a model; `model` may carry a provider prefix ("openai/test-model")."""
        with self._lock:
            self._queues.setdefault(model, deque()).extend(_normalize(r) for r in replies)

    def pending(self, model: str) -> int:
        with self._lock:
            return len(self._queues.get(model, ()))

    def requests_for(self, model: str) -> list[RecordedRequest]:
        short = model.split("/", 1)[-1]
        return [r for r in self.requests if r.model in (model, short)]

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        """The next scripted reply for `model` (`body` is the request, for servers that reply to it)."""
        with self._lock:
            for key, queue in self._queues.items():
                if model and (key == model or key.endswith("/" + model)) and queue:
                    return queue.popleft()
        return dict(self.default_reply)

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def wait(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; True when it is."""
        return self._stopping.wait(seconds)


def _handler_for(server: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        loopback = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    loopback: LoopbackServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, delayed ACKs add ~40 ms per reply.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        rec = self._record(None)
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            models = sorted({k.split("/", 1)[-1] for k in self.loopback._queues} | {"test-model"})
            data = [{"id": m, "object": "model", "owned_by": "loopback"} for m in models]
            self._send_json(rec, 200, {"object": "list", "data": data})
        else:
            self._send_json(rec, 404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        rec = self._record(body)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/embeddings", "/embeddings"):  # vectors, or a fault scripted for the model
            queued = self.loopback.next_reply(rec.model) if self.loopback.pending(rec.model or "") else {}
            if "fault" in queued:
                self._fault(rec, queued)
            else:
                self._send_json(rec, 200, _embeddings(body))
            return
        if path not in ("/v1/chat/completions", "/chat/completions", "/v1/messages", "/messages"):
            self._send_json(rec, 404, {"error": {"message": f"no route {self.path}"}})
            return
        reply = self.loopback.next_reply(rec.model, body)
        rec.reply = reply
        if reply.get("delay_s") and self.loopback.wait(float(reply["delay_s"])):
            return
        if "fault" in reply:
            self._fault(rec, reply)
        elif path.endswith("/messages") and rec.stream:
            self._stream(rec, reply, _anthropic_events(reply, body), done=b"")
        elif path.endswith("/messages"):
            self._send_json(rec, 200, _anthropic_message(reply, body))
        elif rec.stream:
            chunks = (("", c) for c in _openai_stream_chunks(reply, body))
            self._stream(rec, reply, chunks, done=b"data: [DONE]\n\n")
        else:
            self._send_json(rec, 200, _openai_completion(reply, body))

    def _record(self, body: Any) -> RecordedRequest:
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in HIDDEN_HEADERS}
        model = body.get("model") if isinstance(body, dict) else None
        rec = RecordedRequest(self.command, self.path, model, body, headers, time.monotonic())
        rec.client_port = int(self.client_address[1])
        secret = self.headers.get("x-api-key") or self.headers.get("authorization")
        rec.key_tail = secret[-4:] if secret else None
        self.loopback.record(rec)
        return rec

    def _send_json(
        self, rec: RecordedRequest, status: int, data: Any, extra: dict[str, str] | None = None
    ) -> None:
        self._send_bytes(rec, status, json.dumps(data).encode(), extra)

    def _send_bytes(
        self, rec: RecordedRequest, status: int, payload: bytes, extra: dict[str, str] | None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        rec.status = status  # before the write: a client may read the reply before this thread resumes
        self.wfile.write(payload)
        rec.finished = time.monotonic()

    def _fault(self, rec: RecordedRequest, reply: dict[str, Any]) -> None:
        fault = reply["fault"]
        if fault == "timeout":
            self.loopback.wait(float(reply.get("sleep_s", 5.0)))
            self.close_connection = True
            rec.finished = time.monotonic()
            return
        if fault == "malformed":
            self._send_bytes(rec, 200, b'{"id": "chatcmpl-x", "choices": [ {not json', None)
            return
        status = int(fault)
        extra = {"Retry-After": str(reply["retry_after"])} if "retry_after" in reply else {}
        if "location" in reply:  # a moved endpoint (3xx)
            extra["Location"] = str(reply["location"])
        kinds = {429: "rate_limit_error", 401: "authentication_error", 400: "invalid_request_error"}
        err = {
            "message": reply.get("message", f"loopback fault {status}"),
            "type": kinds.get(status, "server_error"),
        }
        if reply.get("code"):
            err["code"] = reply["code"]
        self._send_json(rec, status, {"error": err, "type": "error"}, extra)

    def _stream(
        self, rec: RecordedRequest, reply: dict[str, Any], events: Iterator[tuple[str, Any]], done: bytes
    ) -> None:
        """Server-sent events: (event name or "", JSON data) pairs, paced by the reply's `chunk_delay_s`;
        `break_after` N: the connection dropped after N of them (a worker that dies mid-reply)."""
        chunked = self.loopback.keep_alive_streams
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header(*(("Transfer-Encoding", "chunked") if chunked else ("Connection", "close")))
        self.end_headers()
        self.close_connection = not chunked

        def write(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked and data else data)

        pause = float(reply.get("chunk_delay_s", 0.0))
        cut = reply.get("break_after")  # events sent before the connection is dropped mid-body
        try:
            for sent, (name, data) in enumerate(events):
                if cut is not None and sent >= int(cut):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    rec.status = 200
                    rec.finished = time.monotonic()
                    return
                head = f"event: {name}\n" if name else ""
                write(f"{head}data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if pause and self.loopback.wait(pause):
                    self.close_connection = True
                    return
            rec.status = 200
            write(done)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            rec.status = 499
        rec.finished = time.monotonic()


def _embeddings(body: Any) -> dict[str, Any]:
    """One vector per input, the same for the same text (from its SHA-256), `dimensions` long (default 8)."""
    import hashlib

    texts = body.get("input") if isinstance(body, dict) else None
    texts = [texts] if isinstance(texts, str) else list(texts or [])
    size = int(body.get("dimensions") or 8)
    data = []
    for i, text in enumerate(texts):
        digest = hashlib.sha256(json.dumps(text).encode()).digest()
        data.append({"object": "embedding", "index": i, "embedding": [b / 255 for b in digest[:size]]})
    tokens = sum(len(json.dumps(t)) // 4 + 1 for t in texts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": body.get("model"), "usage": usage}


def _tool_calls(reply: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for i, call in enumerate(reply.get("tool_calls") or ()):
        cid = call["id"] if "id" in call else f"call_{i}_{uuid.uuid4().hex[:8]}"
        calls.append({"id": cid, "name": call["name"], "arguments": _arguments_text(call)})
    return calls


def _openai_completion(reply: dict[str, Any], body: Any) -> dict[str, Any]:
    calls = _tool_calls(reply)
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    prompt, completion, cached = _usage(reply, body)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "unknown"),
        "choices": [
            {"index": i, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            for i in range(int(body.get("n") or 1))  # `n` copies, as a provider gives n samples
        ],
        "usage": usage,
    }


def _openai_stream_chunks(reply: dict[str, Any], body: Any) -> Iterator[dict[str, Any]]:
    base: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": body.get("model", "unknown")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in _chunks(reply.get("content") or "", int(reply.get("chunk_size", 4))):
        yield chunk({"content": piece})
    calls = _tool_calls(reply)
    for index, call in enumerate(calls):
        head = {"index": index, "type": "function", "function": {"name": call["name"], "arguments": ""}}
        if call["id"] is not None:
            head["id"] = call["id"]
        yield chunk({"tool_calls": [head]})
        for piece in _chunks(call["arguments"], 7):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if calls else "stop")
    prompt, completion, cached = _usage(reply, body)
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    yield base | {"choices": [], "usage": usage | {"prompt_tokens_details": {"cached_tokens": cached}}}


def _anthropic_message(reply: dict[str, Any], body: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    for call in _tool_calls(reply):
        try:
            args = json.loads(call["arguments"])
        except json.JSONDecodeError:
            args = {"raw": call["arguments"]}
        content.append(
            {"type": "tool_use", "id": call["id"] or "toolu_x", "name": call["name"], "input": args}
        )
    prompt, completion, cached = _usage(reply, body)
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "unknown"),
        "content": content,
        "stop_reason": "tool_use" if reply.get("tool_calls") else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": completion, "cache_read_input_tokens": cached},
    }


def _anthropic_events(reply: dict[str, Any], body: Any) -> Iterator[tuple[str, Any]]:
    message = _anthropic_message(reply, body)
    blocks, usage = message.pop("content"), message.pop("usage")
    start = message | {"content": [], "stop_reason": None, "usage": usage | {"output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            pieces = _chunks(block["text"], int(reply.get("chunk_size", 4)))
            deltas = [{"type": "text_delta", "text": p} for p in pieces]
        else:
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in _chunks(json.dumps(block["input"]), 7)
            ]
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    end = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield (
        "message_delta",
        {"type": "message_delta", "delta": end, "usage": {"output_tokens": usage["output_tokens"]}},
    )
    yield "message_stop", {"type": "message_stop"}


@pytest.fixture
def loopback() -> Iterator[LoopbackServer]:
    """One loopback provider server, stopped after the test."""
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def loopback_factory() -> Iterator[Callable[[], LoopbackServer]]:
    """Makes as many loopback servers as a test needs; all are stopped after it."""
    servers: list[LoopbackServer] = []

    def make() -> LoopbackServer:
        server = LoopbackServer().start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve scripted OpenAI/Anthropic replies on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="port (0: pick a free one)")
    parser.add_argument("--script", help="JSON file mapping model name -> list of replies")
    args = parser.parse_args(argv)
    server = LoopbackServer(port=args.port)
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            for model, replies in json.load(fh).items():
                server.script(model, replies)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    print(f"loopback listening on {server.base_url}", flush=True)
    try:
        done.wait()
    except KeyboardInterrupt:
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
