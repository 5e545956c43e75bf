"""Values that cross layers: messages, tool calls and results, usage, workers, route decisions.

Frozen dataclasses only; no I/O and no imports beyond the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
PermissionMode = Literal["ask", "auto-edit", "full-auto", "read-only"]
PERMISSION_MODES: tuple[PermissionMode, ...] = ("ask", "auto-edit", "full-auto", "read-only")
RouteSource = Literal["prior", "learned", "override", "fallback"]
TurnStatus = Literal[
    "success", "error_max_turns", "error_max_budget", "error_during_execution", "interrupted"
]


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model sent it; `arguments` stays the raw JSON text (it may be invalid)."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Image:
    """An image a worker may see: its bytes as base64, their media type, and where it came from (a path or a
    URL, for the text transcript)."""

    media_type: str  # image/png, image/jpeg, image/gif, image/webp
    data: str  # base64
    name: str = ""

    @property
    def size(self) -> int:
        """Bytes of the image itself."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    def to_openai(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": f"data:{self.media_type};base64,{self.data}"}}

    def to_json(self) -> dict[str, Any]:
        return {"media_type": self.media_type, "data": self.data, "name": self.name}


def image_note(images: Sequence[Image]) -> str:
    """How a text transcript notes images: `[image: shot.png (image/png, 12 kB)]`."""
    return " ".join(
        f"[image: {i.name or 'unnamed'} ({i.media_type}, {max(i.size // 1000, 1)} kB)]" for i in images
    )


@dataclass(frozen=True)
class Message:
    """One transcript entry in OpenAI chat shape, plus the worker that wrote it (fugu's attribution) and the
    images it carries (a user message's: the text notes them too)."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    worker: str | None = None
    images: tuple[Image, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.images:
            text = [{"type": "text", "text": self.content}] if self.content else []
            out["content"] = [*text, *(i.to_openai() for i in self.images)]
        if self.role == "assistant" and self.tool_calls:
            out["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
            if self.name:
                out["name"] = self.name
        if out["content"] is None and self.role != "assistant":
            out["content"] = ""
        return out

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": t.id, "name": t.name, "arguments": t.arguments} for t in self.tool_calls
            ]
        for key in ("tool_call_id", "name", "worker"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.images:
            data["images"] = [i.to_json() for i in self.images]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        calls = tuple(
            ToolCall(id=t["id"], name=t["name"], arguments=t["arguments"])
            for t in data.get("tool_calls") or ()
        )
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            worker=data.get("worker"),
            images=tuple(
                Image(i["media_type"], i["data"], i.get("name", "")) for i in data.get("images") or ()
            ),
        )

    def as_line(self) -> str:
        """The plain `role: content` form the router reads."""
        text = self.content or ""
        if self.tool_calls:
            calls = " ".join(f"{t.name}({t.arguments})" for t in self.tool_calls)
            text = f"{text} [calls: {calls}]".strip()
        return f"{self.role}: {text}"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cost_usd + other.cost_usd,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "input_tokens": self.prompt_tokens,
            "output_tokens": self.completion_tokens,
            "cache_read_input_tokens": self.cached_tokens,
            "cost_usd": round(self.cost_usd, 8),
        }


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned to the model. Errors are results too: the model reads them."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    exit_code: int | None = None
    duration_ms: float = 0.0
    files_touched: tuple[str, ...] = ()
    denied: bool = False
    spent: tuple[tuple[str, WorkerUsage], ...] = ()  # what the call's subagent spent, by worker (`task`)
    images: tuple[Image, ...] = ()  # images for the worker (read_file on a picture, an MCP tool's)


@dataclass(frozen=True)
class Worker:
    """A named LLM configuration. Stateless."""

    name: str
    model: str
    api_base: str | None = None
    api_key_env: str | None = None
    description: str = ""
    priority: float = 0.0
    price_in: float | None = None
    price_out: float | None = None
    context_limit: int | None = None
    price_cached: float | None = None  # USD per million cached input tokens (a provider's prompt cache)
    vision: bool | None = None  # it accepts images; None: as litellm's model table says
    embedding_model: str | None = None  # the litellm id of the embedding model its endpoint serves, if any
    # its prices were filled in from litellm's table for the router's cost term (`pool.with_table_prices`):
    # its replies are priced as litellm's table prices them (price tiers included), not by those figures
    table_prices: bool = False


@dataclass(frozen=True)
class Attempt:
    """One finished attempt of this turn: the worker that made it, what it cost, and the check's verdict
    (None: no check ran on it)."""

    worker: str
    cost_usd: float
    passed: bool | None = None


@dataclass(frozen=True)
class Evidence:
    """What this turn's checks said so far: the routers' `escalate` reads it (and `pick` never hands a step
    back to a worker that failed the check this turn). `checked`: a check judges each attempt of this turn.
    No attempt starts once `spent` reaches `budget_usd` or `max_attempts` were made (None: no limit)."""

    attempts: tuple[Attempt, ...] = ()
    checked: bool = False
    budget_usd: float | None = None
    max_attempts: int | None = None

    @property
    def spent(self) -> float:
        return sum(a.cost_usd for a in self.attempts)

    @property
    def failed(self) -> frozenset[str]:
        """Workers whose attempt failed the check this turn."""
        return frozenset(a.worker for a in self.attempts if a.passed is False)

    @property
    def exhausted(self) -> str:
        """Why no further attempt may start ("" when one may)."""
        if self.max_attempts is not None and len(self.attempts) >= self.max_attempts:
            return f"{len(self.attempts)} attempts made (at most {self.max_attempts})"
        if self.budget_usd is not None and self.attempts and self.spent >= self.budget_usd:
            return f"${self.spent:.4f} spent of a ${self.budget_usd:g} budget"
        return ""


@dataclass(frozen=True)
class Stop:
    """A router's answer to `escalate` when no further attempt is worth making, and why."""

    reason: str
    scores: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteState:
    """What a router may read before a step (and, with `evidence`, before an attempt)."""

    messages: Sequence[Message]
    step: int
    last_worker: str | None = None
    excluded: frozenset[str] = frozenset()  # never choose these (failed this turn, or unavailable)
    failover: bool = False  # this pick replaces a worker whose call just failed
    masked: Mapping[str, str] = field(default_factory=dict)  # excluded for this step because too small: why
    evidence: Evidence = field(default_factory=Evidence)  # this turn's attempts and their checks

    def barred(self, pool: Sequence[str]) -> frozenset[str]:
        """Workers a step may not go to: the excluded, and those that failed the check this turn (unless
        that would leave none of `pool`)."""
        both = self.excluded | self.evidence.failed
        return both if any(w not in both for w in pool) else self.excluded

    @property
    def tried(self) -> frozenset[str]:
        """Workers that made an attempt this turn (whatever its verdict)."""
        return frozenset(a.worker for a in self.evidence.attempts)

    @property
    def task(self) -> str:
        for m in self.messages:
            if m.role == "user":
                return m.content or ""
        return ""


@dataclass(frozen=True)
class RouteDecision:
    worker: str
    scores: Mapping[str, float]
    source: RouteSource
    latency_ms: float
    role: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "source": self.source,
            "scores": {k: round(float(v), 6) for k, v in self.scores.items()},
            "latency_ms": round(self.latency_ms, 3),
            "role": self.role,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Completion:
    """One LLM reply with its usage and cost."""

    message: Message
    usage: Usage
    model: str
    finish_reason: str | None = None
    warnings: tuple[str, ...] = ()  # things the user should hear once (e.g. no price known for the model)


@dataclass(frozen=True)
class WorkerUsage:
    """What one worker did in a turn: its steps, their cost and tokens, and its litellm model id."""

    steps: int = 0
    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    model: str = ""

    def __add__(self, other: WorkerUsage) -> WorkerUsage:
        return WorkerUsage(
            self.steps + other.steps,
            self.cost_usd + other.cost_usd,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
            self.model or other.model,
        )

    @classmethod
    def of_step(cls, model: str, usage: Usage) -> WorkerUsage:
        """One step's worth."""
        return cls(
            1, usage.cost_usd, usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, model
        )


def add_workers(*parts: Mapping[str, WorkerUsage]) -> dict[str, WorkerUsage]:
    """Per-worker usage summed over several agents' results, in first-seen order."""
    out: dict[str, WorkerUsage] = {}
    for part in parts:
        for name, w in part.items():
            out[name] = out.get(name, WorkerUsage()) + w
    return out


@dataclass(frozen=True)
class Denial:
    """A tool call the permission policy (or the user) refused, as Claude Code reports it, plus the reason."""

    tool_name: str
    tool_use_id: str
    tool_input: Mapping[str, Any]
    reason: str = ""

    @classmethod
    def of(cls, call: ToolCall, reason: str) -> Denial:
        try:
            parsed = json.loads(call.arguments or "{}")
        except ValueError:
            parsed = {"_raw": call.arguments}
        tool_input = parsed if isinstance(parsed, dict) else {"_raw": call.arguments}
        return cls(call.name, call.id, tool_input, reason)

    def to_json(self) -> dict[str, Any]:
        return {
            "tool_name": self.tool_name,
            "tool_use_id": self.tool_use_id,
            "tool_input": dict(self.tool_input),
        }


CheckOutcome = Literal["passed", "failed", "not run"]


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt at a turn and what the evidence said of it. `evidence`: "check" (the session's check
    command judged it), "worker-test" (the last test command the worker ran itself), "" (nothing judged it).
    `set_aside`: the git ref that keeps a failed attempt's changes once the tree was restored."""

    worker: str
    cost_usd: float
    steps: int
    check: CheckOutcome = "not run"
    evidence: str = ""
    command: str = ""
    exit_code: int | None = None
    set_aside: str | None = None
    status: str = "success"  # how the attempt's own run ended (a TurnStatus)

    @property
    def passed(self) -> bool | None:
        return None if self.check == "not run" else self.check == "passed"

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "cost_usd": round(self.cost_usd, 8),
            "steps": self.steps,
            "status": self.status,
            "check": self.check,
            "evidence": self.evidence or None,
            "command": self.command or None,
            "exit_code": self.exit_code,
            "set_aside": self.set_aside,
        }


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended. `duration_ms` (wall) and `duration_api_ms` (time in LLM calls) are set by the
    session; `stop_reason` is the last reply's finish reason (None when the last step was cut while the
    worker was still answering)."""

    status: TurnStatus
    result: str
    session_id: str
    num_turns: int
    usage: Usage
    workers: Mapping[str, WorkerUsage] = field(default_factory=dict)
    denied: tuple[Denial, ...] = ()
    error: str | None = None
    duration_ms: float = 0.0
    duration_api_ms: float = 0.0
    stop_reason: str | None = None
    attempts: tuple[AttemptRecord, ...] = ()  # each attempt and its evidence (a check, the worker's tests)

    @property
    def is_error(self) -> bool:
        return self.status != "success"


@dataclass(frozen=True)
class FallBack:
    """Ultra mode could not plan: the session runs the turn in fugu mode and adds what planning spent."""

    reason: str
    usage: Usage
    workers: Mapping[str, WorkerUsage]
    num_turns: int

    def merged(self, result: TurnResult) -> TurnResult:
        return TurnResult(
            status=result.status,
            result=result.result,
            session_id=result.session_id,
            num_turns=self.num_turns + result.num_turns,
            usage=self.usage + result.usage,
            workers=add_workers(self.workers, result.workers),
            denied=result.denied,
            error=result.error,
            stop_reason=result.stop_reason,
            attempts=result.attempts,
        )


def dumps(data: Any) -> str:
    """Compact, stable JSON for the store and stream-json."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
