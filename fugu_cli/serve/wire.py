"""OpenAI's wire shapes for `fugu serve`: errors (ApiError, api_error), the model list, and the pieces of an
agent turn's reply (usage, the `fugu` summary, finish reasons, the events a stream forwards).

Pure data mapping: no sockets, no sessions, no printing (except an unexpected error's traceback, to the log).
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.calls import AllFailed
from fugu_cli.errors import (
    ConfigError,
    FuguError,
    Interrupted,
    NoWorkerError,
    ProviderError,
    RequestRejected,
    UsageError,
)
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
from fugu_cli.types import TurnResult, Usage

log = logging.getLogger("fugu")

PASS_MODEL = "fugu"  # the router-only pass-through
AGENT_MODELS = ("fugu-agent", "fugu-ultra")
MODELS = (PASS_MODEL, *AGENT_MODELS)
NO_RETRY = {"x-should-retry": "false"}  # OpenAI's SDKs honour it: a failed turn must not run again
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
    """An error the client receives in OpenAI's shape: {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str = "",
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.code, self.param = status, kind, code or None, param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


def dropped_header(notes: Sequence[str]) -> dict[str, str]:
    """`x-fugu-dropped`: what fugu could not honour in the request, as ASCII (an HTTP header), the notes
    separated by "; " (no note holds one)."""
    if not notes:
        return {}
    text = "; ".join(notes).encode("ascii", "replace").decode()
    return {"x-fugu-dropped": text[:4000]}


def bad_param(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, code=code, param=param)


def api_error(e: BaseException) -> ApiError:
    """The client's view of a failure. After provider failures: 502 and no retry (fugu already retried and
    failed over; a client retry would only repeat it); the provider's own error code passes through. When
    every worker is cooling down, 503 with Retry-After: nothing was sent; the client may come back then."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, AllFailed):
        return _all_failed(e)
    if isinstance(e, ProviderError):
        code = e.code or "upstream_failed"
        return ApiError(502, str(e), "server_error", code, headers=NO_RETRY)
    if isinstance(e, Interrupted):
        return ApiError(503, "the request was cancelled (server stopping)", "server_error", "cancelled")
    if isinstance(e, NoWorkerError):
        return ApiError(503, str(e), "server_error", "no_usable_worker", headers=NO_RETRY)
    if isinstance(e, ConfigError):
        return ApiError(500, str(e), "server_error", "config_error", headers=NO_RETRY)
    if isinstance(e, UsageError):
        return ApiError(400, str(e), "invalid_request_error", "bad_request")
    if isinstance(e, FuguError):
        return ApiError(500, str(e), "server_error", "fugu_error", headers=NO_RETRY)
    log.error("fugu serve: unexpected error", exc_info=e)
    return ApiError(500, f"internal error: {type(e).__name__}: {e}", "server_error", "internal_error")


def _all_failed(e: AllFailed) -> ApiError:
    rejected = [f for f in e.failures if isinstance(f, RequestRejected)]
    if rejected and len(rejected) == len(e.failures) and not e.cooling:
        first = rejected[0]
        message = f"the worker refused the request: {first}"
        return ApiError(400, message, code=first.code or "", param=first.param)
    if not e.failures and e.cooling:
        wait = max(1, math.ceil(e.retry_after_s or 1))
        return ApiError(
            503, str(e), "server_error", "workers_cooling_down", headers={"Retry-After": str(wait)}
        )
    codes = {f.code for f in e.failures}
    code = codes.pop() if len(codes) == 1 and None not in codes else "upstream_failed"
    return ApiError(502, str(e), "server_error", code or "upstream_failed", headers=NO_RETRY)


def model_object(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "fugu"}


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


@dataclass
class Tracker:
    """What the request has seen of its agent turn: the route decisions and whether text was streamed."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    streamed: bool = False
    last_step: int | None = None

    def track(self, event: Event) -> None:
        """`see` for a turn nobody streams."""
        self.see(event)

    def see(self, event: Event) -> tuple[str, dict[str, Any] | None]:
        """(text to stream, fugu event to forward)."""
        inner = event.inner if isinstance(event, WorkflowAgentEvent) else event
        if isinstance(inner, RouteChosen) and inner.decision is not None:
            d = inner.decision
            row: dict[str, Any] = {"step": inner.step, "worker": d.worker, "source": d.source}
            row["p"] = round(float(d.scores.get(d.worker, 0.0)), 6)
            if d.reason:  # why: a failover, a worker cooling down, a masked window
                row["reason"] = d.reason
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


def usage_json(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    }


def fugu_summary(result: TurnResult, steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "session_id": result.session_id,
        "status": result.status,
        "total_cost_usd": round(result.usage.cost_usd, 8),
        "workers": {
            n: {"steps": w.steps, "cost_usd": round(w.cost_usd, 8)} for n, w in result.workers.items()
        },
        "steps": list(steps),
        "permission_denials": [d.to_json() for d in result.denied],
    }


def outcome(result: TurnResult | None) -> tuple[str, ApiError | None]:
    """(finish_reason, error): a limit is a truncated answer; a failed or cut turn is an error that the
    client must not retry (the turn may have changed files)."""
    if result is None or result.status == "interrupted":
        return "stop", ApiError(503, "the turn was cancelled (server stopping)", "server_error", "cancelled")
    if result.status == "success":
        return "stop", None
    if result.status in ("error_max_turns", "error_max_budget"):
        return "length", None
    message = result.error or result.result
    return "stop", ApiError(502, message, "server_error", "turn_failed", headers=NO_RETRY)
