"""OpenAI's wire shapes for `fugu serve`: the request (ChatRequest, parse_request), OpenAI errors (ApiError,
api_error) and the pieces of a reply (usage, the `fugu` summary, finish reasons, forwarded events).

Pure data mapping: no sockets, no sessions, no printing (except an unexpected error's traceback).
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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
from fugu_cli.types import Message, TurnResult

MODELS = ("fugu", "fugu-ultra")
# Events a streaming client sees as `fugu` chunks: who acts and why, not the (possibly huge) tool output.
_FORWARDED = (
    SessionStarted,
    RouteChosen,
    ProviderFailed,
    WorkflowPlanned,
    WorkflowStepStarted,
    WorkflowStepFinished,
)


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


@dataclass
class Tracker:
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


def usage_of(result: TurnResult) -> dict[str, int]:
    u = result.usage
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def fugu_summary(result: TurnResult, tracker: Tracker) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "status": result.status,
        "total_cost_usd": round(result.usage.cost_usd, 8),
        "workers": {
            n: {"steps": w.steps, "cost_usd": round(w.cost_usd, 8)} for n, w in result.workers.items()
        },
        "steps": tracker.steps,
        "permission_denials": [d.to_json() for d in result.denied],
    }


def outcome(result: TurnResult | None) -> tuple[str, ApiError | None]:
    """(finish_reason, error): a limit is a truncated answer; a failed or cut turn is an error."""
    if result is None or result.status == "interrupted":
        return "stop", ApiError(503, "the turn was cancelled (server stopping)", "server_error", "cancelled")
    if result.status == "success":
        return "stop", None
    if result.status in ("error_max_turns", "error_max_budget"):
        return "length", None
    return "stop", ApiError(500, result.error or result.result, "server_error", "turn_failed")


def api_error(e: BaseException) -> ApiError:
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
