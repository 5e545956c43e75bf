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

from fugu_cli.calls import AllFailed, Call, Exclusions, Try, WorkerCall
from fugu_cli.context import images as seeing
from fugu_cli.context.budget import ContextPolicy
from fugu_cli.context.guard import ContextGuard
from fugu_cli.errors import ContextOverflow, Interrupted, ProviderError
from fugu_cli.events import (
    AssistantMessage,
    Emit,
    Event,
    Notice,
    ProviderFailed,
    RouteChosen,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    ignore,
)
from fugu_cli.hooks import HookStop, Site, ToolHooks
from fugu_cli.ledger import Ledger, StepRecord, TurnLedger
from fugu_cli.llm import LLM
from fugu_cli.router.roles import is_accept
from fugu_cli.tools import ToolContext
from fugu_cli.types import (
    Completion,
    Denial,
    Message,
    PermissionMode,
    RouteDecision,
    RouteState,
    ToolCall,
    ToolResult,
    TurnResult,
    TurnStatus,
    Usage,
    Worker,
    WorkerUsage,
    image_note,
)

if TYPE_CHECKING:
    from fugu_cli.tools.registry import ToolRegistry

Picker = Callable[[RouteState], RouteDecision]
OnStop = Callable[[str, bool], "str | None"]  # (final answer, a stop was already refused) -> keep going?
MAX_STOP_BLOCKS = 8  # Stop hooks that refuse the agent's stop in a row before it stops anyway


@dataclass(frozen=True)
class Limits:
    max_steps: int = 40
    max_budget_usd: float | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class AgentDeps:
    """What an agent works with; built by app.py (or by the conductor for a workflow step). Shared, so
    frozen: whatever differs between runs travels in `TurnIO`."""

    llm: LLM
    calls: WorkerCall  # how `llm` is called: routing, retries, failover, worker health
    tools: ToolRegistry
    tool_ctx: ToolContext
    ledger: Ledger
    workers: Mapping[str, Worker]
    session_id: str
    role_prompt: Callable[[str], str] | None = None
    context: ContextPolicy | None = None  # None: no token accounting, masking or compaction
    hooks: tuple[ToolHooks, ...] = ()  # around every tool call, in order (the user's hooks, instructions)


@dataclass(frozen=True)
class TurnIO:
    """How one run meets the outside: where its events go, whether text streams, and the cancel flag."""

    emit: Emit = ignore
    cancel: threading.Event | None = None
    stream: bool = False


@dataclass
class _Tally:
    usage: Usage = field(default_factory=Usage)
    workers: dict[str, WorkerUsage] = field(default_factory=dict)
    denied: list[Denial] = field(default_factory=list)
    steps: int = 0
    stop_reason: str | None = None  # the last reply's finish reason; None while a step is cut mid-answer

    def add(self, worker: Worker, usage: Usage) -> None:
        self.usage = self.usage + usage
        step = WorkerUsage.of_step(worker.model, usage)
        self.workers[worker.name] = self.workers.get(worker.name, WorkerUsage()) + step

    def spend(self, spent: Sequence[tuple[str, WorkerUsage]]) -> None:
        """What a tool call's subagent spent: it counts toward this run's cost and budget."""
        for name, w in spent:
            self.usage = self.usage + Usage(w.prompt_tokens, w.completion_tokens, w.cached_tokens, w.cost_usd)
            self.workers[name] = self.workers.get(name, WorkerUsage()) + w


@dataclass(frozen=True)
class _Reply:
    """One worker's answer to a step, and how its call went."""

    decision: RouteDecision
    message: Message
    usage: Usage
    started: float  # wall clock, for the ledger
    finish_reason: str
    api_ms: float


class Agent:
    def __init__(self, deps: AgentDeps) -> None:
        self.d = deps

    def run(
        self,
        messages: list[Message],
        turn: int,
        pick: Picker,
        limits: Limits,
        io: TurnIO | None = None,
        *,
        brief: str = "",
        on_stop: OnStop | None = None,
        steps_before: int = 0,
    ) -> TurnResult:
        """Work on `messages` (appending to it, and recording every new message in the ledger) until a final
        answer, a limit, a failure or an interrupt. A compaction replaces `messages`' contents in place.
        `brief` (the repo map) goes before the turn's message in each step of this run, never to the store.
        `on_stop` is asked before a final answer ends the run; a reason it returns is given to the worker,
        which goes on (Stop hooks). `steps_before`: steps this turn already made (earlier attempts), so this
        run's steps are numbered after them (its limits and its result count its own)."""
        run = _Run(self.d, messages, self.d.ledger.turn(turn), pick, limits, io or TurnIO())
        run.brief = brief
        run.steps_before = steps_before
        run.on_stop = on_stop
        return run.go()


class _Run:
    """One `Agent.run`: its transcript, its turn's ledger, its tally, its permission policy and the workers
    that failed in it."""

    def __init__(
        self,
        deps: AgentDeps,
        messages: list[Message],
        ledger: TurnLedger,
        pick: Picker,
        limits: Limits,
        io: TurnIO,
    ) -> None:
        self.d, self.messages, self.ledger, self.pick, self.limits, self.io = (
            deps,
            messages,
            ledger,
            pick,
            limits,
            io,
        )
        self.tally = _Tally()
        self.policy = deps.tool_ctx.policy  # this run's own: "always" answers extend it, nobody else's
        self.left_plan = False  # the user approved the plan: the run goes on in the mode they chose
        self.failed: set[str] = set()
        self.started = time.monotonic()
        self.sid = deps.session_id
        self.brief = ""
        self.steps_before = 0
        self.on_stop: OnStop | None = None
        self.stop_blocks = 0
        self.hook_stop: HookStop | None = None
        self._turn_message = messages[-1] if messages and messages[-1].role == "user" else None
        self._briefed: Message | None = None
        self.sees: seeing.Sees = deps.context.counter.sees_images if deps.context else seeing.declared
        self.text_only = seeing.TextOnly()
        self.guard = None
        if deps.context is not None:
            workers, schemas, root = list(deps.workers.values()), deps.tools.schemas(), deps.tool_ctx.root
            self.guard = ContextGuard(deps.context, deps.llm, deps.calls, workers, schemas, ledger, root)

    def go(self) -> TurnResult:
        last_worker: str | None = None
        last_text = ""
        while True:
            status = self._limit_hit()
            if status:
                return self._result(status, last_text, _limit_message(status, self.limits))
            step = self.steps_before + self.tally.steps + 1
            state = RouteState(messages=tuple(self.messages), step=step, last_worker=last_worker)
            try:
                got = self._call(state)
            except Interrupted:
                self.tally.stop_reason = None
                return self._result("interrupted", last_text, "interrupted by the user")
            except _AllFailed as e:
                return self._result("error_during_execution", last_text, str(e))
            decision, reply, usage = got.decision, got.message, got.usage
            self.tally.steps += 1
            self.tally.add(self.d.workers[decision.worker], usage)
            self.tally.stop_reason = got.finish_reason
            last_worker = decision.worker
            last_text = reply.content or last_text
            self._append(reply)
            self._emit(
                AssistantMessage(
                    session_id=self.sid,
                    step=step,
                    message=reply,
                    usage=usage,
                    model=self.d.workers[decision.worker].model,
                    finish_reason=got.finish_reason,
                    api_ms=got.api_ms,
                )
            )
            results = self._run_tools(reply, step, decision.worker)
            calls = {c.id: c for c in reply.tool_calls}
            self.tally.denied.extend(Denial.of(calls[r.call_id], r.content) for r in results if r.denied)
            interrupted = self._cancelled()
            status_text = "interrupted" if interrupted else "ok"
            self.ledger.step(StepRecord(step, decision, status_text, usage, reply.content or "", got.started))
            tools = tuple(tc.name for tc in reply.tool_calls)
            self._emit(
                StepFinished(session_id=self.sid, step=step, worker=decision.worker, usage=usage, tools=tools)
            )
            if interrupted:
                return self._result("interrupted", last_text, "interrupted by the user")
            if self.hook_stop is not None:
                return self._result(
                    "error_during_execution", last_text, f"stopped by a hook: {self.hook_stop}"
                )
            accepted = decision.role == "verifier" and is_accept(reply.content)
            if not reply.tool_calls or accepted:
                if not accepted and self._keep_going(reply.content or ""):
                    continue
                return self._result("success", reply.content or "", None)

    def _keep_going(self, answer: str) -> bool:
        """Ask `on_stop` whether the run may end on this answer; its reason becomes the next message."""
        if self.on_stop is None or self.stop_blocks >= MAX_STOP_BLOCKS:
            return False
        reason = self.on_stop(answer, self.stop_blocks > 0)
        if not reason:
            return False
        self.stop_blocks += 1
        self._append(Message(role="user", content=f"<Stop-hook>\n{reason}\n</Stop-hook>"))
        return True

    def _cancelled(self) -> bool:
        return self.io.cancel is not None and self.io.cancel.is_set()

    def _emit(self, event: Event) -> None:
        self.io.emit(event)

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        self.ledger.message(message)

    def _limit_hit(self) -> TurnStatus | None:
        limits, tally = self.limits, self.tally
        if self._cancelled():
            return "interrupted"
        if tally.steps >= limits.max_steps:
            return "error_max_turns"
        if limits.max_budget_usd is not None and tally.usage.cost_usd >= limits.max_budget_usd:
            return "error_max_budget"
        if limits.timeout_s is not None and time.monotonic() - self.started > limits.timeout_s:
            return "error_during_execution"
        return None

    def _call(self, state: RouteState) -> _Reply:
        """Get this step's reply through the worker-call service: routed by the picker (after compacting
        when no worker can hold the transcript or the chosen one is past its threshold), retried, and
        failed over to another worker when one fails; after a context-window error the transcript is
        compacted and the step routed again."""
        step = _Step(self, state)
        try:
            answer = self.d.calls.run(
                Call(
                    pool=tuple(self.d.workers.values()),
                    route=step.route,
                    send=step.send,
                    ledger=self.ledger,
                    step=state.step,
                    cancel=self.io.cancel,
                    failed={name: "failed earlier in this turn" for name in self.failed},
                    recover=step.recover,
                    routed=step.routed,
                    failing=step.failing,
                    retrying=step.retrying,
                )
            )
        except AllFailed as e:
            self.failed.update(f.worker for f in e.failures)
            if step.blind and not e.failures and not e.cooling and len(step.blind) == len(self.d.workers):
                raise _AllFailed(seeing.nobody_sees(list(self.d.workers.values()))) from None
            said = _nobody_left(e, {**step.masked, **step.blind})
            if step.masked and not e.failures and state.step == 1:  # a first step, older turns compacted
                said += (
                    "; the task itself is too long for any worker: save its text in a file in the repository "
                    "and name the file in the task (the workers read files in pieces)"
                )
            raise _AllFailed(said) from None
        self.failed.update(answer.failed)
        completion = answer.value
        for warning in completion.warnings:
            self._emit(Notice(session_id=self.sid, level="warning", text=warning))
        reply = dataclasses.replace(completion.message, worker=answer.worker.name)
        finish = completion.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
        return _Reply(answer.decision, reply, completion.usage, answer.started, finish, answer.api_ms)

    def _compact(self, target: Worker, trigger: str, keep_tokens: int | None = None) -> bool:
        """Compact the transcript for `target`. After a context-window error only the last step stays
        verbatim: the provider's window is smaller than we counted."""
        if self.guard is None:
            return False
        done = self.guard.compact(
            self.messages, target, trigger, self.failed, self.io.cancel, keep_tokens=keep_tokens
        )
        if done is None:
            return False
        if done.summarizer is not None:
            self.tally.add(self.d.workers[done.summarizer.worker], done.usage)
        self._emit(done.event(self.sid))
        return True

    def _request(self, role: str | None) -> list[Message]:
        """The messages a step sends: the transcript, the brief just before the turn's message (a system
        message: context, not the user's words), and the role's note."""
        messages: Sequence[Message] = self.messages
        if self.brief and self._turn_message is not None:
            if self._briefed is None:
                self._briefed = Message(role="system", content=self.brief)
            at = next((i for i, m in enumerate(self.messages) if m is self._turn_message), None)
            if at is not None:
                messages = [*self.messages[:at], self._briefed, *self.messages[at:]]
        return self._with_role(messages, role)

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
            self._emit(TextDelta(session_id=self.sid, worker=worker, text=text))

        return on_text

    def _run_tools(self, reply: Message, step: int, worker: str) -> list[ToolResult]:
        results: list[ToolResult] = []
        for call in reply.tool_calls:
            ran = call
            ctx = self._tool_ctx(worker, call)  # per call: an "always" answer holds for the next one
            if self._cancelled():
                result = ToolResult(call.id, call.name, "Not run: the user interrupted.", is_error=True)
            elif self.hook_stop is not None:
                why = f"Not run: a hook stopped the turn ({self.hook_stop})."
                result = ToolResult(call.id, call.name, why, is_error=True)
            else:
                self._emit(ToolStarted(session_id=self.sid, step=step, worker=worker, call=call))
                ran, result = self._call_tool(call, ctx, Site(self.ledger, step, worker))
            self.ledger.tool_call(step, worker, ran, result)
            self.tally.spend(result.spent)
            self._append(
                Message(
                    role="tool", content=result.content, tool_call_id=call.id, name=call.name, worker=worker
                )
            )
            self._emit(ToolFinished(session_id=self.sid, step=step, worker=worker, call=call, result=result))
            results.append(result)
        self._show_images(results)
        return results

    def _show_images(self, results: Sequence[ToolResult]) -> None:
        """Images the tools returned reach the next step as a user message after the results (no provider
        takes an image in a tool result), or only its note when no worker in the pool can see images."""
        shown = [(r.name, i) for r in results for i in r.images]
        if not shown:
            return
        note = "Images from the tool results: " + "; ".join(f"{name}: {image_note([i])}" for name, i in shown)
        images = tuple(i for _, i in shown)
        if not any(self.sees(w) for w in self.d.workers.values()):
            note += " (not shown: no worker in the pool can see images)"
            images = ()
        self._append(Message(role="user", content=note, images=images))

    def _call_tool(self, call: ToolCall, ctx: ToolContext, site: Site) -> tuple[ToolCall, ToolResult]:
        """Run one call between the hooks: each may refuse it, change it or add to its result. Returns the
        call as it ran (a hook may have changed its arguments) and its result."""
        try:
            for hook in self.d.hooks:
                gated = hook.before_tool(call, ctx, site)
                if isinstance(gated, ToolResult):
                    return call, gated
                call, ctx = gated
        except HookStop as e:
            self.hook_stop = e
            return call, ToolResult(
                call.id, call.name, f"Not run: a hook stopped the turn ({e}).", is_error=True
            )
        result = self.d.tools.run(call, ctx)
        try:
            for hook in self.d.hooks:
                result = hook.after_tool(call, result, ctx, site)
        except HookStop as e:
            self.hook_stop = e
        return call, result

    def _tool_ctx(self, worker: str, call: ToolCall) -> ToolContext:
        spent = self.tally.usage.cost_usd
        budget = self.limits.max_budget_usd
        return dataclasses.replace(
            self.d.tool_ctx,
            agent=worker,
            cancel=self.io.cancel,
            notify=self._notifier(),
            policy=self.policy,
            grant=self._grant,
            call_id=call.id,
            budget_left=None if budget is None else max(budget - spent, 0.0),
            leave_plan=self._leave_plan if self.d.tool_ctx.leave_plan and not self.left_plan else None,
        )

    def _leave_plan(self, mode: PermissionMode) -> None:
        """The user approved the plan: this run goes on in `mode`, and its owner (the session) is told."""
        self.policy = dataclasses.replace(self.policy, mode=mode)
        self.left_plan = True
        if self.d.tool_ctx.leave_plan is not None:
            self.d.tool_ctx.leave_plan(mode)

    def _grant(self, prefix: str) -> None:
        """An "always" answer: this run allows `prefix` from now on, and its owner (the session) is told."""
        self.policy = self.policy.allowing(prefix)
        if self.d.tool_ctx.grant is not None:
            self.d.tool_ctx.grant(prefix)

    def _notifier(self) -> Callable[[str], None]:
        def notify(text: str) -> None:
            self._emit(Notice(session_id=self.sid, level="warning", text=text))

        return notify

    def _result(self, status: TurnStatus, text: str, error: str | None) -> TurnResult:
        """The run's outcome; its error is said once, by whoever shows the result (not also as a notice)."""
        tally = self.tally
        return TurnResult(
            status=status,
            result=text if status == "success" else (error or text),
            session_id=self.sid,
            num_turns=tally.steps,
            usage=tally.usage,
            workers=dict(tally.workers),
            denied=tuple(tally.denied),
            error=error if status != "success" else None,
            stop_reason=tally.stop_reason,
        )


class _Step:
    """One step's routing and attempts, as the worker-call service asks for them: the picker with the
    transcript's fit (compacting when needed), one attempt at a worker, recovery from a context-window error
    by compaction, and the route line and failure events."""

    def __init__(self, run: _Run, state: RouteState) -> None:
        self.run = run
        self.state = state
        self.compacted: set[str] = set()  # what triggered a compaction in this step (each at most once)
        self.masked: dict[str, str] = {}
        self.blind: dict[str, str] = {}  # masked because the step has images they cannot see

    def route(self, ex: Exclusions) -> RouteDecision:
        run = self.run
        while True:
            avoid = set(ex.names)
            counted = run.guard.fit(run._request(None), avoid) if run.guard else None
            if counted and counted.nobody_fits and "no-fit" not in self.compacted:
                self.compacted.add("no-fit")
                if run.guard and run._compact(run.guard.roomiest(avoid), "no-fit"):
                    continue
            self.masked = dict(counted.masked) if counted else {}
            workers = list(run.d.workers.values())
            self.blind = seeing.blind(workers, run.sees, avoid) if seeing.fresh(run.messages) else {}
            masked = {**self.masked, **self.blind}
            decision = run.pick(
                dataclasses.replace(
                    self.state,
                    messages=tuple(run.messages),
                    excluded=frozenset(avoid | masked.keys()),
                    failover=ex.failover,
                    masked=masked,
                )
            )
            if masked:
                sight = "masked (images): " + "; ".join(self.blind.values()) if self.blind else ""
                why = "; ".join(x for x in (decision.reason, counted.reason() if counted else "", sight) if x)
                decision = dataclasses.replace(decision, reason=why)
            worker = run.d.workers[decision.worker]
            if counted and counted.past_threshold(worker.name) and "threshold" not in self.compacted:
                self.compacted.add("threshold")
                if run._compact(worker, "threshold"):
                    continue
            return decision

    def send(self, attempt: Try) -> Completion:
        run, worker = self.run, attempt.worker
        request = run._request(attempt.decision.role)
        return run.d.llm.complete(
            worker,
            request if run.sees(worker) else run.text_only(request),
            run.d.tools.schemas(),
            on_text=run._streamer(worker.name) if run.io.stream else None,
            cancel=run.io.cancel,
        )

    def recover(self, attempt: Try, error: ProviderError) -> bool:
        """After a context-window error only the last step stays verbatim (the provider's window is smaller
        than we counted), once per worker; then the same step is routed again."""
        key = f"overflow:{attempt.worker.name}"
        if not isinstance(error, ContextOverflow) or key in self.compacted:
            return False
        self.compacted.add(key)
        return self.run._compact(attempt.worker, "overflow", keep_tokens=0)

    def routed(self, decision: RouteDecision) -> None:
        run, step = self.run, self.state.step
        run._emit(RouteChosen(session_id=run.sid, step=step, decision=decision))
        run._emit(StepStarted(session_id=run.sid, step=step, worker=decision.worker))

    def retrying(self, attempt: Try, error: ProviderError, delay_s: float, attempts: int) -> None:
        wait = f"{delay_s:.0f} s" if delay_s >= 1.5 else f"{delay_s:.1f} s"
        text = f"{error}; trying again in {wait} (attempt {attempt.number + 1} of {attempts})"
        self.run._emit(Notice(session_id=self.run.sid, level="hint", text=text))

    def failing(self, attempt: Try, error: ProviderError, spent_ms: float) -> None:
        run = self.run
        event = ProviderFailed(
            session_id=run.sid,
            step=self.state.step,
            worker=attempt.worker.name,
            error=str(error),
            api_ms=spent_ms,
        )
        run._emit(event)


class _AllFailed(Exception):
    pass


def _nobody_left(e: AllFailed, masked: Mapping[str, str]) -> str:
    if masked and not e.failures and not e.cooling:
        why = "; ".join(masked.values())
        if all(m.endswith("cannot see images") for m in masked.values()):
            return f"no worker can take this step: {why}"
        return f"no worker can take this step (no window can hold the transcript, even compacted): {why}"
    if not masked:
        return str(e)
    return f"{e}; " + "; ".join(masked.values())


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
