"""One agent loop: before each step ask a picker for the worker, call the LLM, run its tool calls, record.

Used by the session (fugu mode, the picker is the router) and by ultra-mode steps (a fixed worker).
Never prints: everything it does is an Event and a ledger row. A model's mistake never raises out of here.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fugu_cli.errors import Interrupted, ProviderError
from fugu_cli.events import (
    AssistantMessage,
    Emit,
    Notice,
    ProviderFailed,
    RouteChosen,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
)
from fugu_cli.ledger import Ledger
from fugu_cli.llm import LLM
from fugu_cli.router.roles import is_accept
from fugu_cli.tools import ToolContext
from fugu_cli.types import (
    Message,
    RouteDecision,
    RouteState,
    ToolResult,
    TurnResult,
    TurnStatus,
    Usage,
    Worker,
    WorkerUsage,
)

if TYPE_CHECKING:
    from fugu_cli.tools.registry import ToolRegistry

Picker = Callable[[RouteState], RouteDecision]


@dataclass(frozen=True)
class Limits:
    max_steps: int = 40
    max_budget_usd: float | None = None
    timeout_s: float | None = None


@dataclass
class AgentDeps:
    """Everything an agent needs; built by app.py (or by the conductor for a workflow step)."""

    llm: LLM
    tools: ToolRegistry
    tool_ctx: ToolContext
    ledger: Ledger
    workers: Mapping[str, Worker]
    emit: Emit
    session_id: str
    stream: bool = False
    role_prompt: Callable[[str], str] | None = None


@dataclass
class _Tally:
    usage: Usage = field(default_factory=Usage)
    workers: dict[str, WorkerUsage] = field(default_factory=dict)
    denied: list[str] = field(default_factory=list)
    steps: int = 0

    def add(self, worker: str, usage: Usage) -> None:
        self.usage = self.usage + usage
        w = self.workers.get(worker, WorkerUsage())
        self.workers[worker] = WorkerUsage(w.steps + 1, w.cost_usd + usage.cost_usd)


class Agent:
    def __init__(self, deps: AgentDeps) -> None:
        self.d = deps

    def run(
        self,
        messages: list[Message],
        turn: int,
        pick: Picker,
        limits: Limits,
        *,
        cancel: threading.Event | None = None,
        on_message: Callable[[Message], None] = lambda m: None,
    ) -> TurnResult:
        """Work on `messages` (appending to it) until a final answer, a limit, a failure or an interrupt."""
        tally = _Tally()
        started = time.monotonic()
        last_worker: str | None = None
        last_text = ""
        self._failed: set[str] = set()
        while True:
            status = self._limit_hit(tally, limits, started, cancel)
            if status:
                return self._result(status, last_text, tally, _limit_message(status, limits))
            step = tally.steps + 1
            state = RouteState(messages=tuple(messages), step=step, last_worker=last_worker)
            try:
                decision, reply, usage, step_started = self._call(state, turn, pick, cancel)
            except Interrupted:
                return self._result("interrupted", last_text, tally, "interrupted by the user")
            except _AllFailed as e:
                return self._result("error_during_execution", last_text, tally, str(e))
            tally.steps = step
            tally.add(decision.worker, usage)
            last_worker = decision.worker
            last_text = reply.content or last_text
            messages.append(reply)
            on_message(reply)
            self.d.emit(AssistantMessage(self.d.session_id, step=step, message=reply, usage=usage))
            results = self._run_tools(reply, turn, step, decision.worker, cancel, messages, on_message)
            tally.denied.extend(r.content for r in results if r.denied)
            interrupted = cancel is not None and cancel.is_set()
            self.d.ledger.step(
                turn,
                step,
                decision,
                "interrupted" if interrupted else "ok",
                usage,
                reply.content or "",
                step_started,
            )
            self.d.emit(
                StepFinished(
                    self.d.session_id,
                    step=step,
                    worker=decision.worker,
                    usage=usage,
                    tools=tuple(tc.name for tc in reply.tool_calls),
                )
            )
            if interrupted:
                return self._result("interrupted", last_text, tally, "interrupted by the user")
            accepted = decision.role == "verifier" and is_accept(reply.content)
            if not reply.tool_calls or accepted:
                return self._result("success", reply.content or "", tally, None)

    def _limit_hit(
        self, tally: _Tally, limits: Limits, started: float, cancel: threading.Event | None
    ) -> TurnStatus | None:
        if cancel is not None and cancel.is_set():
            return "interrupted"
        if tally.steps >= limits.max_steps:
            return "error_max_turns"
        if limits.max_budget_usd is not None and tally.usage.cost_usd >= limits.max_budget_usd:
            return "error_max_budget"
        if limits.timeout_s is not None and time.monotonic() - started > limits.timeout_s:
            return "error_during_execution"
        return None

    def _call(
        self, state: RouteState, turn: int, pick: Picker, cancel: threading.Event | None
    ) -> tuple[RouteDecision, Message, Usage, float]:
        """Pick a worker and get its reply; on a provider failure ask the picker for another (failover)."""
        errors: list[str] = []
        failover = False
        while True:
            try:
                decision = pick(
                    dataclasses.replace(state, excluded=frozenset(self._failed), failover=failover)
                )
            except LookupError:
                raise _AllFailed("every worker failed: " + "; ".join(errors)) from None
            self.d.ledger.route(turn, state.step, decision)
            self.d.emit(RouteChosen(self.d.session_id, step=state.step, decision=decision))
            worker = self.d.workers[decision.worker]
            self.d.emit(StepStarted(self.d.session_id, step=state.step, worker=worker.name))
            step_started = time.time()
            try:
                completion = self.d.llm.complete(
                    worker,
                    self._with_role(state.messages, decision.role),
                    self.d.tools.schemas(),
                    on_text=self._streamer(worker.name) if self.d.stream else None,
                    cancel=cancel,
                )
            except Interrupted:
                self.d.ledger.step(turn, state.step, decision, "interrupted", Usage(), "", step_started)
                raise
            except ProviderError as e:
                errors.append(f"{worker.name}: {e}")
                self.d.emit(
                    ProviderFailed(self.d.session_id, step=state.step, worker=worker.name, error=str(e))
                )
                self.d.ledger.step(
                    turn, state.step, decision, "provider_error", Usage(), str(e), step_started
                )
                self._failed.add(worker.name)
                failover = True
                continue
            reply = dataclasses.replace(completion.message, worker=worker.name)
            return decision, reply, completion.usage, step_started

    def _with_role(self, messages: Sequence[Message], role: str | None) -> list[Message]:
        if not role or self.d.role_prompt is None:
            return list(messages)
        note = self.d.role_prompt(role)
        out = list(messages)
        if out and out[0].role == "system":
            out[0] = dataclasses.replace(out[0], content=f"{out[0].content}\n\n{note}")
        else:
            out.insert(0, Message(role="system", content=note))
        return out

    def _streamer(self, worker: str) -> Callable[[str], None]:
        def on_text(text: str) -> None:
            self.d.emit(TextDelta(self.d.session_id, worker=worker, text=text))

        return on_text

    def _run_tools(
        self,
        reply: Message,
        turn: int,
        step: int,
        worker: str,
        cancel: threading.Event | None,
        messages: list[Message],
        on_message: Callable[[Message], None],
    ) -> list[ToolResult]:
        ctx = dataclasses.replace(self.d.tool_ctx, agent=worker, cancel=cancel)
        results: list[ToolResult] = []
        for call in reply.tool_calls:
            if cancel is not None and cancel.is_set():
                result = ToolResult(call.id, call.name, "Not run: the user interrupted.", is_error=True)
            else:
                self.d.emit(ToolStarted(self.d.session_id, step=step, worker=worker, call=call))
                result = self.d.tools.run(call, ctx)
            self.d.ledger.tool_call(turn, step, worker, call, result)
            tool_msg = Message(
                role="tool", content=result.content, tool_call_id=call.id, name=call.name, worker=worker
            )
            messages.append(tool_msg)
            on_message(tool_msg)
            self.d.emit(ToolFinished(self.d.session_id, step=step, worker=worker, call=call, result=result))
            results.append(result)
        return results

    def _result(self, status: TurnStatus, text: str, tally: _Tally, error: str | None) -> TurnResult:
        if error and status != "success":
            self.d.emit(Notice(self.d.session_id, level="error", text=error))
        return TurnResult(
            status=status,
            result=text if status == "success" else (error or text),
            session_id=self.d.session_id,
            num_turns=tally.steps,
            usage=tally.usage,
            workers=dict(tally.workers),
            denied=tuple(tally.denied),
            error=error if status != "success" else None,
        )


class _AllFailed(Exception):
    pass


def _limit_message(status: TurnStatus, limits: Limits) -> str | None:
    if status == "error_max_turns":
        return f"stopped at the step limit ({limits.max_steps}); raise it with --max-turns"
    if status == "error_max_budget":
        return f"stopped at the budget limit (${limits.max_budget_usd}); raise it with --max-budget-usd"
    if status == "error_during_execution":
        return f"stopped at the time limit ({limits.timeout_s} s)"
    if status == "interrupted":
        return "interrupted by the user"
    return None
