"""HTTP for `fugu serve`: the request handler (routes, auth, body limits), a turn's event pump with client
disconnect detection, and the server-sent-events stream of chat.completion.chunk objects.
"""

from __future__ import annotations

import hmac
import json
import queue
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from fugu_cli.events import Event
from fugu_cli.serve.wire import (
    ApiError,
    ChatRequest,
    Tracker,
    api_error,
    fugu_summary,
    outcome,
    parse_request,
    usage_of,
)
from fugu_cli.session import Session
from fugu_cli.types import TurnResult

if TYPE_CHECKING:
    from fugu_cli.serve.server import FuguServer

MAX_BODY = 16 * 1024 * 1024
_POLL_S = 0.2


def _client_gone(sock: socket.socket) -> bool:
    """True when the client closed its end: readable, and a peek reads end-of-file."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def handler_for(server: FuguServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        fugu = server

    return Handler


class _Handler(BaseHTTPRequestHandler):
    fugu: FuguServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # SSE chunks are small writes; Nagle would hold each for a delayed ACK

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") not in ("/v1/models", "/models"):
            self._error(ApiError(404, f"no route GET {self.path}", code="not_found"))
            return
        try:
            self._authorize()
            ids = self.fugu.model_ids()
        except Exception as e:
            self._error(api_error(e))
            return
        data = [{"id": i, "object": "model", "created": 0, "owned_by": "fugu"} for i in ids]
        self._json(200, {"object": "list", "data": data})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(ApiError(404, f"no route POST {self.path}", code="not_found"))
            return
        try:
            self._authorize()
            req = parse_request(self._body(), self.headers.get("X-Fugu-Session"))
            session = self.fugu.session_for(req)
        except Exception as e:
            self._error(api_error(e))
            return
        self._chat(req, session)

    def _authorize(self) -> None:
        want = self.fugu.api_key
        if not want:
            return
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), want.encode()):
            raise ApiError(
                401,
                "invalid API key: send the key fugu serve was given as a bearer token",
                code="invalid_api_key",
            )

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ApiError(413, f"request body over {MAX_BODY} bytes", code="too_large")
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"the request body is not JSON: {e}", code="invalid_json") from None

    def _chat(self, req: ChatRequest, session: Session) -> None:
        events: queue.Queue[Event | _Done] = queue.Queue()
        cancel = threading.Event()

        def work() -> None:
            try:
                events.put(_Done(self.fugu.run_turn(session, req, events.put, cancel), None))
            except BaseException as e:
                events.put(_Done(None, e))

        threading.Thread(target=work, name="fugu-serve-turn", daemon=True).start()
        stream = _Stream(self, req.model, session.id) if req.stream else None
        tracker = Tracker()
        gone = False
        while True:
            try:
                item = events.get(timeout=_POLL_S)
            except queue.Empty:
                if not gone and _client_gone(self.connection):
                    gone = True
                    cancel.set()
                continue
            if isinstance(item, _Done):
                break
            text, fugu_event = tracker.see(item)
            if stream is not None and not gone and (text or fugu_event):
                gone = not stream.send(content=text, fugu=fugu_event)
                if gone:
                    cancel.set()
        if gone:
            self.close_connection = True
            return
        if item.error is not None:
            error = api_error(item.error)
            if stream is not None:
                stream.fail(error)
            else:
                self._error(error)
            return
        self._finish(req, item.result, tracker, stream)

    def _finish(
        self, req: ChatRequest, result: TurnResult | None, tracker: Tracker, stream: _Stream | None
    ) -> None:
        finish, error = outcome(result)
        extra = fugu_summary(result, tracker) if result is not None else {}
        if stream is not None:
            if error is not None:
                stream.fail(error, extra)
                return
            assert result is not None
            if not tracker.streamed and result.result:
                stream.send(content=result.result)
            stream.close(finish, usage_of(result), extra)
            return
        if error is not None:
            self._json(error.status, {**error.body(), "fugu": extra})
            return
        assert result is not None
        self._json(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": result.result},
                        "finish_reason": finish,
                    }
                ],
                "usage": usage_of(result),
                "fugu": extra,
            },
            {"X-Fugu-Session": result.session_id},
        )

    def _error(self, error: ApiError) -> None:
        # the request body may be unread (a refused key): closing keeps it from parsing as the next request
        self.close_connection = True
        extra = {"Connection": "close"} | ({"WWW-Authenticate": "Bearer"} if error.status == 401 else {})
        self._json(error.status, error.body(), extra)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(data, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)


@dataclass(frozen=True)
class _Done:
    result: TurnResult | None
    error: BaseException | None


class _Stream:
    """Server-sent chat.completion.chunk objects; fugu's events ride in chunks with empty content."""

    def __init__(self, handler: _Handler, model: str, session_id: str) -> None:
        self.h = handler
        self.base: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}"}
        self.base |= {"object": "chat.completion.chunk"}
        self.base |= {"created": int(time.time()), "model": model}
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.send_header("X-Fugu-Session", session_id)
        handler.end_headers()
        handler.close_connection = True
        self.send(role="assistant")

    def send(self, *, content: str = "", fugu: dict[str, Any] | None = None, role: str | None = None) -> bool:
        delta: dict[str, Any] = {"role": role, "content": content} if role else {"content": content}
        chunk = self.base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        return self._write({**chunk, "fugu": fugu} if fugu is not None else chunk)

    def close(self, finish: str, usage: dict[str, int], extra: dict[str, Any]) -> None:
        last = self.base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "fugu": extra}
        if self._write(last) and self._write(self.base | {"choices": [], "usage": usage}):
            self._raw(b"data: [DONE]\n\n")

    def fail(self, error: ApiError, extra: dict[str, Any] | None = None) -> None:
        if self._write({**error.body(), **({"fugu": extra} if extra else {})}):
            self._raw(b"data: [DONE]\n\n")

    def _write(self, data: dict[str, Any]) -> bool:
        return self._raw(f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode())

    def _raw(self, payload: bytes) -> bool:
        try:
            self.h.wfile.write(payload)
            self.h.wfile.flush()
            return True
        except OSError:
            return False
