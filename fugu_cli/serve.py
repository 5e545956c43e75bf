"""`fugu serve`: an OpenAI-compatible endpoint (models "fugu", "fugu-ultra", "fugu/<worker>") over sessions.

Owns the wire shapes (chat.completion, SSE chunks, OpenAI errors), the table of live sessions and the one lock
that serialises turns on the repository. Standard library HTTP only; sessions come from app.py.
Prints nothing but `main`'s listening line and warnings.
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from fugu_cli.app import RunOptions, build_session, discover_pool, load_options_config, open_store, repo_root
from fugu_cli.errors import ConfigError, FuguError, NoWorkerError, UsageError
from fugu_cli.events import (
    Event,
    ProviderFailed,
    RouteChosen,
    SessionStarted,
    TextDelta,
    WorkflowAgentEvent,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
)
from fugu_cli.session import Session
from fugu_cli.types import Message, TurnResult

MODELS = ("fugu", "fugu-ultra")
PERMISSION_MODES = ("ask", "auto-edit", "full-auto", "read-only")
MAX_BODY = 16 * 1024 * 1024
MAX_LIVE_SESSIONS = 64
_POLL_S = 0.2
# Events a streaming client sees as `fugu` chunks: who acts and why, not the (possibly huge) tool output.
_FORWARDED = (
    SessionStarted,
    RouteChosen,
    ProviderFailed,
    WorkflowPlanned,
    WorkflowStepStarted,
    WorkflowStepFinished,
)


@dataclass
class ServeOptions:
    """`fugu serve` flags. `api_key` None: FUGU_SERVE_KEY when set, else no authentication."""

    host: str = "127.0.0.1"
    port: int = 8787
    cwd: Path = field(default_factory=Path.cwd)
    pool: str | None = None
    permission_mode: str = "read-only"  # no terminal to ask, so the safe default refuses every write
    api_key: str | None = None
    router: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None


class ApiError(Exception):
    """An error the client receives in OpenAI's shape."""

    def __init__(
        self, status: int, message: str, kind: str = "invalid_request_error", code: str = ""
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code or None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "code": self.code, "param": None}}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    task: str
    context: tuple[Message, ...]  # the messages before the last user message, as transcript entries
    stream: bool
    session_key: str | None
    ultra: bool
    worker: str | None


def parse_request(body: Any, header_session: str | None = None) -> ChatRequest:
    """OpenAI's request shape to a fugu turn: the last user message is the task, earlier ones its context."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "missing 'model': use fugu, fugu-ultra or fugu/<worker>", code="missing_model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "'messages' must be a list of message objects", code="invalid_messages")
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        raise ApiError(400, "'messages' has no user message: nothing to do", code="invalid_messages")
    task = _text(messages[last].get("content"))
    if not task.strip():
        raise ApiError(400, "the last user message is empty", code="invalid_messages")
    name = model.removeprefix("openai/")
    ultra, worker = _model_choice(name)
    key = header_session or body.get("session_id") or body.get("user")
    return ChatRequest(
        model=name,
        task=task,
        context=tuple(_context(messages[:last])),
        stream=bool(body.get("stream")),
        session_key=str(key) if key else None,
        ultra=ultra,
        worker=worker,
    )


def _model_choice(model: str) -> tuple[bool, str | None]:
    if model in MODELS:
        return model == "fugu-ultra", None
    if model.startswith("fugu/") and model != "fugu/":
        return False, model.removeprefix("fugu/")
    raise ApiError(
        400,
        f"unknown model {model!r}: use fugu, fugu-ultra or fugu/<worker> (GET /v1/models lists them)",
        code="model_not_found",
    )


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text") for p in content if isinstance(p, dict) and "text" in p)
        return "\n".join(str(p) for p in parts if p)
    raise ApiError(400, "message content must be a string or a list of text parts", code="invalid_content")


def _context(messages: Sequence[dict[str, Any]]) -> list[Message]:
    """Earlier client messages; the client's own tool calls become text (its tools are not fugu's)."""
    out: list[Message] = []
    for m in messages:
        role, text = m.get("role"), _text(m.get("content"))
        if role in ("system", "developer"):
            out.append(Message(role="system", content=f"Instructions from the API client:\n{text}"))
        elif role == "user":
            out.append(Message(role="user", content=text))
        elif role == "assistant":
            calls = [c.get("function", {}) for c in m.get("tool_calls") or () if isinstance(c, dict)]
            said = [f"[called {c.get('name')}({c.get('arguments', '')})]" for c in calls]
            out.append(Message(role="assistant", content="\n".join([text, *said]).strip()))
        elif role in ("tool", "function"):
            who = m.get("name") or m.get("tool_call_id") or "tool"
            out.append(Message(role="user", content=f"Result of the client's {who}:\n{text}"))
        else:
            raise ApiError(400, f"unknown message role {role!r}", code="invalid_messages")
    return out


class FuguServer:
    """The HTTP server, the live sessions (by client key and by fugu id) and the repository lock."""

    def __init__(self, options: ServeOptions) -> None:
        if options.permission_mode not in PERMISSION_MODES:
            raise UsageError(
                f"--permission-mode {options.permission_mode}: choose one of {', '.join(PERMISSION_MODES)}"
            )
        self.options = options
        self.root = repo_root(options.cwd)
        self.api_key = options.api_key if options.api_key is not None else os.environ.get("FUGU_SERVE_KEY")
        load_options_config(self._run_options())  # a broken config fails at start, not on the first request
        self.store = open_store()
        self.turn_lock = threading.Lock()  # one repository: turns never edit it concurrently
        self._table = threading.Lock()
        self._live: OrderedDict[str, Session] = OrderedDict()
        self._aliases: dict[str, str] = {}  # client key -> fugu session id
        self._running: set[threading.Event] = set()
        self.httpd = ThreadingHTTPServer((options.host, options.port), _handler_for(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FuguServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="fugu-serve", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._table:
            for cancel in self._running:
                cancel.set()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
            self.httpd.server_close()

    def _run_options(self, *, resume: str | None = None) -> RunOptions:
        o = self.options
        return RunOptions(
            cwd=o.cwd,
            pool=o.pool,
            router=o.router,
            permission_mode=o.permission_mode,
            max_turns=o.max_turns,
            max_budget_usd=o.max_budget_usd,
            resume=resume,
        )

    def model_ids(self) -> list[str]:
        workers, _ = discover_pool(load_options_config(self._run_options()), self.options.cwd)
        return [*MODELS, *(f"fugu/{w.name}" for w in workers)]

    def session_for(self, req: ChatRequest) -> Session:
        """The session a request continues, or a new one.

        The key is the `X-Fugu-Session` header, else the body's `session_id`, else its `user`. A known
        key (or a fugu session id of this repository, even from before a restart) continues that session:
        the server's transcript is the history, and only the request's last user message is read. Without a
        key, or with a new one, a fresh session starts, seeded with the request's earlier messages.
        """
        key = req.session_key
        with self._table:
            sid = self._aliases.get(key, key) if key else None
            session = self._live.get(sid) if sid else None
            if session is not None:
                self._live.move_to_end(session.id)
        if session is None:
            row = self.store.get_session(sid) if sid else None
            resume = row.id if row is not None and row.id == sid and row.cwd == str(self.root) else None
            session = build_session(self._run_options(resume=resume), store=self.store)
            if resume is None:
                _seed(session, req.context)
            self._remember(key, session)
        if req.worker is not None and req.worker not in session.workers:
            names = ", ".join(f"fugu/{n}" for n in session.workers)
            raise ApiError(
                400, f"unknown model fugu/{req.worker}: usable workers are {names}", code="model_not_found"
            )
        return session

    def _remember(self, key: str | None, session: Session) -> None:
        with self._table:
            self._live[session.id] = session
            if key:
                self._aliases[key] = session.id
            while len(self._live) > MAX_LIVE_SESSIONS:  # evicted sessions are still resumable by id
                self._live.popitem(last=False)

    def run_turn(
        self, session: Session, req: ChatRequest, emit: Any, cancel: threading.Event
    ) -> TurnResult | None:
        """One turn under the repository lock; None when the client left before the turn began."""
        with self._table:
            self._running.add(cancel)
        try:
            with self.turn_lock:
                if cancel.is_set():
                    return None
                session.ultra = req.ultra
                session.set_worker(req.worker)
                session.deps.agent.stream = req.stream
                return session.run_turn(req.task, emit, cancel)
        finally:
            with self._table:
                self._running.discard(cancel)


def _seed(session: Session, context: Sequence[Message]) -> None:
    session.add_context(context)


@dataclass
class _Tracker:
    """What the request has seen of its turn: the route decisions and whether text was streamed."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    streamed: bool = False
    last_step: int | None = None

    def see(self, event: Event) -> tuple[str, dict[str, Any] | None]:
        """(text to stream, fugu event to forward)."""
        inner = event.inner if isinstance(event, WorkflowAgentEvent) else event
        if isinstance(inner, RouteChosen) and inner.decision is not None:
            d = inner.decision
            row: dict[str, Any] = {"step": inner.step, "worker": d.worker, "source": d.source}
            row["p"] = round(float(d.scores.get(d.worker, 0.0)), 6)
            if isinstance(event, WorkflowAgentEvent):
                row["workflow_step"] = event.step
            self.steps.append(row)
        if isinstance(event, TextDelta) and event.text:
            step = len(self.steps)
            gap = "\n\n" if self.streamed and step != self.last_step else ""
            self.streamed, self.last_step = True, step
            return gap + event.text, None
        if isinstance(inner, _FORWARDED):
            return "", event.to_stream_json()
        return "", None


def _usage(result: TurnResult) -> dict[str, int]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def _fugu(result: TurnResult, tracker: _Tracker) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "status": result.status,
        "total_cost_usd": round(result.usage.cost_usd, 8),
        "workers": {
            n: {"steps": w.steps, "cost_usd": round(w.cost_usd, 8)} for n, w in result.workers.items()
        },
        "steps": tracker.steps,
        "permission_denials": list(result.denied),
    }


def _outcome(result: TurnResult | None) -> tuple[str, ApiError | None]:
    """(finish_reason, error): a limit is a truncated answer; a failed or cut turn is an error."""
    if result is None or result.status == "interrupted":
        return "stop", ApiError(503, "the turn was cancelled (server stopping)", "server_error", "cancelled")
    if result.status == "success":
        return "stop", None
    if result.status in ("error_max_turns", "error_max_budget"):
        return "length", None
    return "stop", ApiError(500, result.error or result.result, "server_error", "turn_failed")


def _api_error(e: BaseException) -> ApiError:
    if isinstance(e, ApiError):
        return e
    if isinstance(e, NoWorkerError):
        return ApiError(503, str(e), "server_error", "no_usable_worker")
    if isinstance(e, ConfigError):
        return ApiError(500, str(e), "server_error", "config_error")
    if isinstance(e, UsageError):
        return ApiError(400, str(e), "invalid_request_error", "bad_request")
    if isinstance(e, FuguError):
        return ApiError(500, str(e), "server_error", "fugu_error")
    traceback.print_exception(e, file=sys.stderr)
    return ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error", "internal_error")


def _client_gone(sock: socket.socket) -> bool:
    """True when the client closed its end: readable, and a peek reads end-of-file."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _handler_for(server: FuguServer) -> type[BaseHTTPRequestHandler]:
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
            self._error(_api_error(e))
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
            self._error(_api_error(e))
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
        tracker = _Tracker()
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
            error = _api_error(item.error)
            if stream is not None:
                stream.fail(error)
            else:
                self._error(error)
            return
        self._finish(req, item.result, tracker, stream)

    def _finish(
        self, req: ChatRequest, result: TurnResult | None, tracker: _Tracker, stream: _Stream | None
    ) -> None:
        finish, error = _outcome(result)
        extra = _fugu(result, tracker) if result is not None else {}
        if stream is not None:
            if error is not None:
                stream.fail(error, extra)
                return
            assert result is not None
            if not tracker.streamed and result.result:
                stream.send(content=result.result)
            stream.close(finish, _usage(result), extra)
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
                "usage": _usage(result),
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


def main(options: ServeOptions) -> int:
    """Serve until SIGINT or SIGTERM. Returns the exit code (2: cannot listen or bad configuration)."""
    try:
        server = FuguServer(options)
    except FuguError as e:
        print(f"fugu serve: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(
            f"fugu serve: cannot listen on {options.host}:{options.port}: {e.strerror or e}", file=sys.stderr
        )
        return 2
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    server.start()
    print(f"fugu serve: listening on {server.url} (repository {server.root})", flush=True)
    if not server.api_key and options.host not in ("127.0.0.1", "localhost", "::1"):
        print("fugu serve: warning: listening beyond loopback without --api-key", file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
