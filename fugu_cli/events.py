"""Events a session emits while it works; the UI, stream-json and the server render them.

Never prints. Every event knows its stream-json form (Claude Code's shape plus fugu's route events).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, TurnResult, Usage


@dataclass(frozen=True, kw_only=True)
class Event:
    session_id: str

    def to_stream_json(self) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True, kw_only=True)
class SessionStarted(Event):
    cwd: str
    workers: tuple[str, ...]
    tools: tuple[str, ...]
    permission_mode: str
    router: str

    def to_stream_json(self) -> dict[str, Any]:
        return {
            "type": "system",
            "subtype": "init",
            "session_id": self.session_id,
            "cwd": self.cwd,
            "workers": list(self.workers),
            "tools": list(self.tools),
            "permissionMode": self.permission_mode,
            "router": self.router,
        }


@dataclass(frozen=True, kw_only=True)
class RouteChosen(Event):
    step: int
    decision: RouteDecision

    def to_stream_json(self) -> dict[str, Any]:
        d = self.decision
        return {
            "type": "system",
            "subtype": "route",
            "session_id": self.session_id,
            "step": self.step,
            "worker": d.worker,
            "source": d.source,
            "scores": {k: round(float(v), 6) for k, v in d.scores.items()},
            "latency_ms": round(d.latency_ms, 3),
            **({"role": d.role} if d.role else {}),
            **({"reason": d.reason} if d.reason else {}),
        }


@dataclass(frozen=True, kw_only=True)
class StepStarted(Event):
    step: int
    worker: str


@dataclass(frozen=True, kw_only=True)
class TextDelta(Event):
    """A streamed piece of the worker's reply (only when the client streams)."""

    worker: str
    text: str


@dataclass(frozen=True, kw_only=True)
class AssistantMessage(Event):
    step: int
    message: Message
    usage: Usage = field(default_factory=Usage)

    def to_stream_json(self) -> dict[str, Any]:
        m = self.message
        content: list[dict[str, Any]] = []
        if m.content:
            content.append({"type": "text", "text": m.content})
        for tc in m.tool_calls:
            content.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": _args(tc)})
        return {
            "type": "assistant",
            "session_id": self.session_id,
            "step": self.step,
            "worker": m.worker,
            "message": {"role": "assistant", "content": content, "usage": self.usage.to_json()},
        }


@dataclass(frozen=True, kw_only=True)
class ToolStarted(Event):
    step: int
    worker: str
    call: ToolCall


@dataclass(frozen=True, kw_only=True)
class ToolFinished(Event):
    step: int
    worker: str
    call: ToolCall
    result: ToolResult

    def to_stream_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "type": "user",
            "session_id": self.session_id,
            "step": self.step,
            "agent": self.worker,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": r.call_id,
                        "content": r.content,
                        "is_error": r.is_error,
                    }
                ],
            },
        }


@dataclass(frozen=True, kw_only=True)
class ProviderFailed(Event):
    """A worker failed after its retries; the session fails over."""

    step: int
    worker: str
    error: str

    def to_stream_json(self) -> dict[str, Any]:
        return {
            "type": "system",
            "subtype": "provider_error",
            "session_id": self.session_id,
            "step": self.step,
            "worker": self.worker,
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True)
class Notice(Event):
    """Something the user should know (a warning, a fallback), not part of the transcript."""

    level: str = "info"
    text: str

    def to_stream_json(self) -> dict[str, Any]:
        return {
            "type": "system",
            "subtype": "notice",
            "session_id": self.session_id,
            "level": self.level,
            "text": self.text,
        }


@dataclass(frozen=True, kw_only=True)
class StepFinished(Event):
    step: int
    worker: str
    usage: Usage = field(default_factory=Usage)
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TurnFinished(Event):
    result: TurnResult

    def to_stream_json(self) -> dict[str, Any]:
        return result_json(self.result)


@dataclass(frozen=True, kw_only=True)
class WorkflowPlanned(Event):
    """Ultra mode: the workflow about to run. `steps` rows: {"step", "worker", "subtask", "access"}."""

    workflow: int
    steps: tuple[dict[str, Any], ...] = ()
    source: str = "conductor"  # conductor | plan-file | recursion
    parent_step: int | None = None

    def to_stream_json(self) -> dict[str, Any]:
        return {
            "type": "system",
            "subtype": "workflow",
            "session_id": self.session_id,
            "workflow": self.workflow,
            "source": self.source,
            "steps": [dict(s) for s in self.steps],
            **({"parent_step": self.parent_step} if self.parent_step is not None else {}),
        }


@dataclass(frozen=True, kw_only=True)
class WorkflowStepStarted(Event):
    workflow: int
    step: int
    worker: str
    parent_step: int | None = None

    def to_stream_json(self) -> dict[str, Any]:
        return _workflow_step(self, "start", {})


@dataclass(frozen=True, kw_only=True)
class WorkflowStepFinished(Event):
    workflow: int
    step: int
    worker: str
    status: str
    cost_usd: float
    elapsed_s: float
    parent_step: int | None = None

    def to_stream_json(self) -> dict[str, Any]:
        extra = {"status": self.status, "cost_usd": round(self.cost_usd, 8)}
        return _workflow_step(self, "finish", {**extra, "elapsed_s": round(self.elapsed_s, 3)})


def _workflow_step(
    e: WorkflowStepStarted | WorkflowStepFinished, kind: str, extra: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "workflow_step",
        "session_id": e.session_id,
        "event": kind,
        "workflow": e.workflow,
        "step": e.step,
        "worker": e.worker,
        **extra,
        **({"parent_step": e.parent_step} if e.parent_step is not None else {}),
    }


@dataclass(frozen=True, kw_only=True)
class WorkflowAgentEvent(Event):
    """An event of one workflow step's agent, tagged with the step (steps run concurrently).

    Its stream-json is the inner event's with `"workflow_step": step` added.
    """

    step: int
    inner: Event

    def to_stream_json(self) -> dict[str, Any] | None:
        data = self.inner.to_stream_json()
        return None if data is None else {**data, "workflow_step": self.step}


def result_json(r: TurnResult) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": r.status,
        "is_error": r.is_error,
        "num_turns": r.num_turns,
        "result": r.result,
        "session_id": r.session_id,
        "total_cost_usd": round(r.usage.cost_usd, 8),
        "usage": r.usage.to_json(),
        "workers": {
            name: {"steps": w.steps, "cost_usd": round(w.cost_usd, 8)} for name, w in r.workers.items()
        },
        "permission_denials": list(r.denied),
        **({"error": r.error} if r.error else {}),
    }


def _args(tc: ToolCall) -> Any:
    import json

    try:
        return json.loads(tc.arguments or "{}")
    except ValueError:
        return {"_raw": tc.arguments}


Emit = Callable[[Event], None]


def ignore(_: Event) -> None:
    """An Emit that drops everything."""


@dataclass(frozen=True, kw_only=True)
class Compacted(Event):
    """The transcript was compacted: older steps replaced by a summary (the store keeps them all).

    `trigger`: threshold | no-fit | overflow | user. Tokens are counted with `worker`'s tokenizer."""

    trigger: str
    worker: str
    summarizer: str
    tokens_before: int
    tokens_after: int
    messages_replaced: int
    focus: str = ""

    def to_stream_json(self) -> dict[str, Any]:
        return {
            "type": "system",
            "subtype": "compact",
            "session_id": self.session_id,
            "trigger": self.trigger,
            "worker": self.worker,
            "summarizer": self.summarizer,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "messages_replaced": self.messages_replaced,
            **({"focus": self.focus} if self.focus else {}),
        }
