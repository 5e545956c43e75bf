"""Events a session emits while it works; the UI, stream-json and the server render them.

Never prints. Every event knows its stream-json form: Claude Code's message shapes (what `claude_agent_sdk`'s
parser reads: `system/init`, `assistant`, `user` tool results, `stream_event`, `result`), with fugu's own
events (route, workflow, provider_error, notice) as `system` messages of their own subtypes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fugu_cli import __version__
from fugu_cli.compat import CLAUDE_MODE_NAMES, result_subtype, stop_reason, terminal_reason
from fugu_cli.types import (
    AttemptRecord,
    Message,
    RouteDecision,
    ToolCall,
    ToolResult,
    TurnResult,
    Usage,
    WorkerUsage,
)


@dataclass(frozen=True, kw_only=True)
class Event:
    session_id: str

    def to_stream_json(self) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True, kw_only=True)
class SessionStarted(Event):
    """A turn begins (Claude Code's `system/init`, sent at the start of every turn)."""

    cwd: str
    workers: tuple[str, ...]
    tools: tuple[str, ...]
    permission_mode: str
    router: str
    model: str = "auto"  # the forced worker's litellm id, or "auto": the router picks per step
    api_key_source: str = "none"  # the variables the workers' keys come from
    mcp_servers: tuple[tuple[str, str], ...] = ()  # (name, connected|pending|failed)
    slash_commands: tuple[str, ...] = ()  # custom commands and MCP prompts, without the slash

    def to_stream_json(self) -> dict[str, Any]:
        return _system(
            self,
            "init",
            cwd=self.cwd,
            tools=list(self.tools),
            mcp_servers=[{"name": name, "status": status} for name, status in self.mcp_servers],
            model=self.model,
            permissionMode=CLAUDE_MODE_NAMES.get(self.permission_mode, self.permission_mode),
            slash_commands=list(self.slash_commands),
            apiKeySource=self.api_key_source,
            output_style="default",
            agents=[],
            skills=[],
            plugins=[],
            fugu_version=__version__,
            fugu_permission_mode=self.permission_mode,
            workers=list(self.workers),
            router=self.router,
        )


@dataclass(frozen=True, kw_only=True)
class RouteChosen(Event):
    step: int
    decision: RouteDecision

    def to_stream_json(self) -> dict[str, Any]:
        d = self.decision
        return _system(
            self,
            "route",
            step=self.step,
            worker=d.worker,
            source=d.source,
            scores={k: round(float(v), 6) for k, v in d.scores.items()},
            latency_ms=round(d.latency_ms, 3),
            **({"role": d.role} if d.role else {}),
            **({"reason": d.reason} if d.reason else {}),
        )


@dataclass(frozen=True, kw_only=True)
class StepStarted(Event):
    step: int
    worker: str


@dataclass(frozen=True, kw_only=True)
class TextDelta(Event):
    """A streamed piece of the worker's reply (only when the client streams)."""

    worker: str
    text: str

    def to_stream_json(self) -> dict[str, Any]:
        delta = {"type": "text_delta", "text": self.text}
        return {
            "type": "stream_event",
            "uuid": _uuid(),
            "session_id": self.session_id,
            "event": {"type": "content_block_delta", "index": 0, "delta": delta},
            "parent_tool_use_id": None,
            "worker": self.worker,
        }


@dataclass(frozen=True, kw_only=True)
class AssistantMessage(Event):
    """A worker's reply. `model` is its litellm id, `finish_reason` the provider's, `api_ms` how long the
    call took."""

    step: int
    message: Message
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    api_ms: float = 0.0

    def to_stream_json(self) -> dict[str, Any]:
        m = self.message
        content: list[dict[str, Any]] = []
        if m.content:
            content.append({"type": "text", "text": m.content})
        for tc in m.tool_calls:
            content.append({"type": "tool_use", "id": tc.id, "name": tc.name, "input": _args(tc)})
        line_id = _uuid()
        return {
            "type": "assistant",
            "message": {
                "id": f"msg_{line_id.replace('-', '')}",
                "type": "message",
                "role": "assistant",
                "model": self.model or m.worker or "",
                "content": content,
                "stop_reason": stop_reason(self.finish_reason),
                "stop_sequence": None,
                "usage": usage_json(self.usage),
            },
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": line_id,
            "step": self.step,
            "worker": m.worker,
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
        block = {
            "type": "tool_result",
            "tool_use_id": r.call_id,
            "content": r.content,
            "is_error": r.is_error,
        }
        return {
            "type": "user",
            "message": {"role": "user", "content": [block]},
            "parent_tool_use_id": None,
            "session_id": self.session_id,
            "uuid": _uuid(),
            "step": self.step,
            "agent": self.worker,
        }


@dataclass(frozen=True, kw_only=True)
class ProviderFailed(Event):
    """A worker failed after its retries; the session fails over."""

    step: int
    worker: str
    error: str
    api_ms: float = 0.0  # how long the failed call (with its retries) took

    def to_stream_json(self) -> dict[str, Any]:
        return _system(self, "provider_error", step=self.step, worker=self.worker, error=self.error)


@dataclass(frozen=True, kw_only=True)
class Notice(Event):
    """Something the user should know (a warning, a fallback), not part of the transcript."""

    level: str = "info"
    text: str

    def to_stream_json(self) -> dict[str, Any]:
        return _system(self, "notice", level=self.level, text=self.text)


@dataclass(frozen=True, kw_only=True)
class StepFinished(Event):
    step: int
    worker: str
    usage: Usage = field(default_factory=Usage)
    tools: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AttemptStarted(Event):
    """A worker starts attempt `attempt` at a turn that a check judges; `reason` says why this worker (the
    first attempt, or an escalation after failed checks)."""

    attempt: int
    worker: str
    reason: str = ""

    def to_stream_json(self) -> dict[str, Any]:
        return _system(self, "attempt", attempt=self.attempt, worker=self.worker, reason=self.reason)


@dataclass(frozen=True, kw_only=True)
class AttemptChecked(Event):
    """What the evidence said of an attempt that ended: the check's verdict, and where a failed attempt's
    changes were set aside. `output`: the end of the check's output."""

    attempt: int
    record: AttemptRecord
    output: str = ""

    def to_stream_json(self) -> dict[str, Any]:
        return _system(self, "check", attempt=self.attempt, **self.record.to_json(), output=self.output)


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
    conductor: str = ""  # which conductor planned: "prompted conductor NAME" | "trained conductor PATH"

    def to_stream_json(self) -> dict[str, Any]:
        return _system(
            self,
            "workflow",
            workflow=self.workflow,
            source=self.source,
            steps=[dict(s) for s in self.steps],
            **({"parent_step": self.parent_step} if self.parent_step is not None else {}),
            **({"conductor": self.conductor} if self.conductor else {}),
        )


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
    return _system(
        e,
        "workflow_step",
        event=kind,
        workflow=e.workflow,
        step=e.step,
        worker=e.worker,
        **extra,
        **({"parent_step": e.parent_step} if e.parent_step is not None else {}),
    )


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
    """Claude Code's `result` message for a turn, plus fugu's per-worker breakdown (`workers`) and its own
    word for how the turn ended (`fugu_status`: an interrupt is `interrupted`, not an execution error)."""
    stop = stop_reason(r.stop_reason) or ("end_turn" if r.status == "success" else None)
    data: dict[str, Any] = {
        "type": "result",
        "subtype": result_subtype(r.status),
        "is_error": r.is_error,
        "duration_ms": round(r.duration_ms),
        "duration_api_ms": round(r.duration_api_ms),
        "num_turns": r.num_turns,
        "result": r.result,
        "stop_reason": stop,
        "session_id": r.session_id,
        "total_cost_usd": round(r.usage.cost_usd, 8),
        "usage": usage_json(r.usage),
        "modelUsage": model_usage(r.workers),
        "permission_denials": [d.to_json() for d in r.denied],
        "terminal_reason": terminal_reason(r.status, r.stop_reason),
        "uuid": _uuid(),
        "fugu_status": r.status,
        "workers": {
            name: {"steps": w.steps, "cost_usd": round(w.cost_usd, 8), "model": w.model}
            for name, w in r.workers.items()
        },
    }
    if r.attempts:
        data["attempts"] = [a.to_json() for a in r.attempts]
    if r.is_error:
        data["errors"] = [r.error or r.result or r.status]
    return data


def usage_json(u: Usage) -> dict[str, Any]:
    """Anthropic's usage shape: `input_tokens` excludes the cached part (OpenAI's prompt_tokens include
    it), so input + cache_read is what the worker read. `cost_usd` is fugu's."""
    return {
        "input_tokens": max(u.prompt_tokens - u.cached_tokens, 0),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "cost_usd": round(u.cost_usd, 8),
    }


def model_usage(workers: Mapping[str, WorkerUsage]) -> dict[str, dict[str, Any]]:
    """Claude Code's `modelUsage`: tokens and cost keyed by model id (workers sharing a model are summed)."""
    by_model: dict[str, WorkerUsage] = {}
    for name, w in workers.items():
        key = w.model or name
        by_model[key] = by_model.get(key, WorkerUsage()) + w
    return {
        model: {
            "inputTokens": max(w.prompt_tokens - w.cached_tokens, 0),
            "outputTokens": w.completion_tokens,
            "cacheReadInputTokens": w.cached_tokens,
            "cacheCreationInputTokens": 0,
            "webSearchRequests": 0,
            "costUSD": round(w.cost_usd, 8),
            "contextWindow": 0,
            "maxOutputTokens": 0,
        }
        for model, w in by_model.items()
    }


def _system(source: Event, subtype: str, /, **fields: Any) -> dict[str, Any]:
    return {"type": "system", "subtype": subtype, "uuid": _uuid(), "session_id": source.session_id, **fields}


def _uuid() -> str:
    return str(uuid.uuid4())


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
