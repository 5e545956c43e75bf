"""The conductor's planning: ask a pool worker for a workflow, repair it once, or say why it failed.

The conductor is an `Agent` with no tools, so its calls are ledgered, shown and fail over like any other step.
Never raises for a bad plan: the outcome carries the validation error instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fugu_cli import prompts
from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.conductor.workflow import CONDUCTOR, MAX_STEPS, PlanError, Workflow, parse
from fugu_cli.ledger import Ledger
from fugu_cli.types import (
    Message,
    RouteDecision,
    RouteState,
    TurnResult,
    Usage,
    Worker,
    WorkerUsage,
    add_workers,
)


@dataclass(frozen=True)
class PlanRequest:
    request: str
    memory: str = ""
    depth: int = 0
    subtask: str = ""  # for a recursion step: its part of the work
    results: str = ""  # for a recursion step: what the steps it may see reported


@dataclass(frozen=True)
class PlanOutcome:
    workflow: Workflow | None
    error: str | None
    usage: Usage
    workers: dict[str, WorkerUsage]
    num_turns: int
    repaired: bool = False
    planner: str = ""  # which conductor planned: "prompted conductor NAME" or "trained conductor PATH"


class Plans(Protocol):
    """Writes workflows: the prompted conductor (`Planner`) or a trained one (`conductor/local.py`)."""

    def plan(self, req: PlanRequest, ledger: Ledger, turn: int, io: TurnIO) -> PlanOutcome: ...


def fixed_picker(worker: str, pool: Sequence[Worker], reason: str) -> Callable[[RouteState], RouteDecision]:
    """Always `worker`; after a provider failure the highest-priority worker that has not failed."""

    def pick(state: RouteState) -> RouteDecision:
        if worker not in state.excluded:
            return RouteDecision(worker, {worker: 1.0}, "override", 0.0, reason=reason)
        spare = sorted((w for w in pool if w.name not in state.excluded), key=lambda w: -w.priority)
        if not spare:
            raise LookupError("no worker left")
        return RouteDecision(spare[0].name, {spare[0].name: 1.0}, "fallback", 0.0, reason=f"{worker} failed")

    return pick


class Planner:
    """Asks `conductor` (a pool worker) for workflows; `deps` is the template of the conductor's agent."""

    def __init__(self, deps: AgentDeps, conductor: str, pool: Sequence[Worker], max_depth: int) -> None:
        self.deps = deps
        self.conductor = conductor
        self.pool = list(pool)
        self.max_depth = max_depth

    def plan(self, req: PlanRequest, ledger: Ledger, turn: int, io: TurnIO) -> PlanOutcome:
        from fugu_cli.tools.registry import ToolRegistry

        names = [w.name for w in self.pool]
        allow = req.depth < self.max_depth
        messages = [
            Message(role="system", content=self.system_prompt(allow)),
            Message(role="user", content=self._user_prompt(req)),
        ]
        deps = dataclasses.replace(self.deps, tools=ToolRegistry([]), ledger=ledger)
        agent = Agent(deps)
        io = dataclasses.replace(io, stream=False)
        pick = fixed_picker(self.conductor, self.pool, "conductor")
        results: list[TurnResult] = []
        error = ""
        for attempt in range(2):
            if attempt:
                repair = prompts.load("conductor_repair").replace("{{error}}", error)
                messages.append(Message(role="user", content=repair))
            result = agent.run(messages, turn, pick, Limits(max_steps=1), io)
            results.append(result)
            if result.status == "interrupted":
                return _outcome(None, "interrupted by the user", results)
            text = _last_answer(messages)
            if not text:
                # its one step ended in tool calls (it has none): the step limit is not the user's to raise
                called = result.status == "error_max_turns"
                error = "the conductor called tools instead of writing a workflow" if called else ""
                error = error or result.error or "the conductor gave no answer"
                if result.status != "success" and result.num_turns == 0:
                    return _outcome(None, error, results)
                continue
            try:
                return _outcome(
                    parse(text, names, allow_conductor=allow),
                    None,
                    results,
                    repaired=attempt > 0,
                    planner=f"prompted conductor {self.conductor}",
                )
            except PlanError as e:
                error = str(e)
        return _outcome(None, error, results)

    def system_prompt(self, allow_conductor: bool) -> str:
        workers = "\n".join(f"- {w.name}: {w.description or w.model}" for w in self.pool)
        note = (
            f", or {CONDUCTOR!r} to hand that part back to you (you plan it again with the results so far)"
            if allow_conductor
            else ""
        )
        text = prompts.load("conductor").replace("{{workers}}", workers)
        return text.replace("{{max_steps}}", str(MAX_STEPS)).replace("{{conductor_note}}", note)

    def _user_prompt(self, req: PlanRequest) -> str:
        parts = [f"The user's request:\n{req.request}"]
        if req.subtask:
            recurse = prompts.load("conductor_recurse")
            for key, value in (
                ("depth", str(req.depth)),
                ("max_depth", str(self.max_depth)),
                ("subtask", req.subtask),
                ("results", req.results or "(none)"),
            ):
                recurse = recurse.replace("{{" + key + "}}", value)
            parts.append(recurse)
        if req.memory:
            parts.append(req.memory)
        return "\n\n".join(parts)


def _last_answer(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.role == "assistant":
            return m.content or ""
        if m.role == "user":
            return ""
    return ""


def _outcome(
    workflow: Workflow | None,
    error: str | None,
    results: Sequence[TurnResult],
    repaired: bool = False,
    planner: str = "",
) -> PlanOutcome:
    usage, workers, steps = total_usage(results)
    return PlanOutcome(workflow, error, usage, workers, steps, repaired, planner)


class Spent(Protocol):
    @property
    def usage(self) -> Usage: ...
    @property
    def workers(self) -> Mapping[str, WorkerUsage]: ...
    @property
    def num_turns(self) -> int: ...


def total_usage(parts: Iterable[Spent]) -> tuple[Usage, dict[str, WorkerUsage], int]:
    """Usage, per-worker usage and LLM steps summed over agents' results."""
    parts = list(parts)
    usage = sum((r.usage for r in parts), Usage())
    return usage, add_workers(*(r.workers for r in parts)), sum(r.num_turns for r in parts)
