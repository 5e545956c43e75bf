"""The `task` tool's subagents for one turn: each `task` call becomes a fresh isolated agent (own transcript,
own ledger scope under its caller's), staffed step by step by the router (or by the worker its custom agent
names), with the caller's permissions (its tools are the read-only ones unless those allow more), and within
limits on depth, count per turn and budget. Its events reach the turn tagged with the call
(`SubagentEvent`); its final answer and what it spent go back to the call.

Built by the session for each turn (`Staff`); never prints.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fugu_cli import prompts
from fugu_cli.agent import AgentDeps, Limits, Picker, TurnIO
from fugu_cli.custom_agents import GENERAL, AgentSpec
from fugu_cli.events import Emit, Event, Notice, SubagentEvent, SubagentFinished, SubagentStarted
from fugu_cli.subagents.isolation import fixed_picker, run_isolated
from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.base import ToolFailed
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.tools.task import TaskOutcome, TaskRequest
from fugu_cli.types import Message, TurnResult, Usage, Worker

log = logging.getLogger("fugu")

# tools a subagent never gets: the list and the plan are its caller's, and the user is not there to answer
_CALLERS_ONLY = frozenset({"todo_write", "exit_plan_mode"})


@dataclass(frozen=True)
class SubagentLimits:
    """`[subagents]`: how deep subagents may nest, how many one turn may start, and each one's limits."""

    max_depth: int = 1  # 1: the turn's agent may call task, its subagents may not
    max_per_turn: int = 8
    max_turns: int = 20  # steps of one subagent
    max_budget_usd: float | None = None  # one subagent's; it never exceeds what its caller has left


@dataclass(frozen=True)
class Staff:
    """What one turn's subagents are made of."""

    deps: AgentDeps  # the turn's parts (permissions, checkpoints, approver); tools and ledger are narrowed
    pick: Picker  # the router, as the turn's own steps are routed
    agents: Mapping[str, AgentSpec]
    limits: SubagentLimits
    io: TurnIO  # the turn's cancel flag (events go to each caller's emit)
    system_prompt: str  # the session's instructions; the subagent note and the agent's own are added
    turn: int


class _Count:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()


class Delegation:
    """The `ToolContext.delegate` of one agent: its `task` calls run here (at `depth`, under `scope`)."""

    def __init__(
        self, staff: Staff, emit: Emit, scope: str = "main", depth: int = 1, count: _Count | None = None
    ) -> None:
        self.staff, self.emit, self.scope, self.depth = staff, emit, scope, depth
        self._count = count or _Count()

    def __call__(self, request: TaskRequest, ctx: ToolContext) -> TaskOutcome:
        staff = self.staff
        spec = self._spec(request.subagent_type)
        n = self._take_slot()
        sid = staff.deps.session_id
        scope = f"{self.scope}/t{staff.turn}.{request.call_id or n}"
        call = request.call_id
        inner = _tagged(self.emit, sid, call)
        child = None
        if self.depth < staff.limits.max_depth:
            child = Delegation(staff, inner, scope, self.depth + 1, self._count)
        deps = self._deps(spec, ctx, child)
        pick = self._picker(spec, inner)
        budget = _least(staff.limits.max_budget_usd, ctx.budget_left)
        limits = Limits(max_steps=staff.limits.max_turns, max_budget_usd=budget)
        io = TurnIO(emit=inner, cancel=staff.io.cancel, stream=False)
        self.emit(
            SubagentStarted(
                session_id=sid,
                parent_tool_use_id=call,
                agent=spec.name,
                description=request.description,
                depth=self.depth,
            )
        )
        result = self._run(deps, scope, self._seed(spec, request), pick, limits, io)
        self.emit(
            SubagentFinished(
                session_id=sid,
                parent_tool_use_id=call,
                agent=spec.name,
                status=result.status,
                steps=result.num_turns,
                cost_usd=result.usage.cost_usd,
                workers=tuple(result.workers),
            )
        )
        return TaskOutcome(
            agent=spec.name,
            status=result.status,
            answer=result.result,
            steps=result.num_turns,
            spent=tuple(result.workers.items()),
        )

    def _run(
        self, deps: AgentDeps, scope: str, seed: list[Message], pick: Picker, limits: Limits, io: TurnIO
    ) -> TurnResult:
        try:
            return run_isolated(deps, scope, self.staff.turn, seed, pick, limits, io)
        except Exception as e:  # a broken subagent must not take its caller down: the caller reads why
            log.error("subagent %s crashed", scope, exc_info=e)
            error = f"the subagent failed: {type(e).__name__}: {e}"
            sid = self.staff.deps.session_id
            return TurnResult("error_during_execution", error, sid, 0, Usage(), error=error)

    def _spec(self, name: str) -> AgentSpec:
        agents = self.staff.agents
        spec = agents.get(name) or next((a for a in agents.values() if a.name.lower() == name.lower()), None)
        if spec is None:
            known = ", ".join(agents) or GENERAL.name
            raise ToolFailed(f"no agent named {name!r}; subagent_type must be one of: {known}.")
        return spec

    def _take_slot(self) -> int:
        count, most = self._count, self.staff.limits.max_per_turn
        with count.lock:
            if count.n >= most:
                raise ToolFailed(
                    f"this turn has started {count.n} subagents, its limit ([subagents] max_per_turn): "
                    "finish the work yourself."
                )
            count.n += 1
            return count.n

    def _seed(self, spec: AgentSpec, request: TaskRequest) -> list[Message]:
        parts = [self.staff.system_prompt, prompts.load("subagent")]
        if spec.instructions:
            parts.append(f"Your instructions as the {spec.name} agent:\n{spec.instructions}")
        system = "\n\n".join(p for p in parts if p)
        return [Message(role="system", content=system), Message(role="user", content=request.prompt)]

    def _deps(self, spec: AgentSpec, ctx: ToolContext, child: Delegation | None) -> AgentDeps:
        """The caller's parts with the subagent's tools and context: the caller's permissions as they stand
        (its "always" answers included, and reaching it), nested subagents while the depth allows."""
        template = self.staff.deps
        tool_ctx = dataclasses.replace(
            template.tool_ctx, policy=ctx.policy, grant=ctx.grant, delegate=child, leave_plan=None
        )
        tools = _tools(template.tools, spec, ctx.policy, nested=child is not None)
        return dataclasses.replace(template, tool_ctx=tool_ctx, tools=tools)

    def _picker(self, spec: AgentSpec, emit: Emit) -> Picker:
        if spec.routed:
            return self.staff.pick
        workers = self.staff.deps.workers
        worker = _worker_for(spec.model, workers.values())
        if worker is None:
            sid = self.staff.deps.session_id
            text = f"agent {spec.name} asks for model {spec.model!r}, not in the pool: the router staffs it"
            emit(Notice(session_id=sid, level="warning", text=text))
            return self.staff.pick
        return fixed_picker(worker, list(workers.values()), f"agent {spec.name}")


def offer(registry: ToolRegistry, agents: Mapping[str, AgentSpec]) -> ToolRegistry:
    """`registry` with its `task` tool telling the workers which agents they may hand a subtask to."""
    if "task" not in registry.names():
        return registry
    tool = registry.get("task")
    listed = "\n".join(f"- {a.name}: {a.description}" for a in agents.values())
    described = f"{tool.description}\n\nAgents (subagent_type):\n{listed}"
    return registry.replacing(dataclasses.replace(tool, description=described))


def _tools(registry: ToolRegistry, spec: AgentSpec, policy: PermissionPolicy, nested: bool) -> ToolRegistry:
    """What a subagent may call: its agent's tools (all by default), read-only ones unless the caller's
    permissions allow more, `task` only while nesting is allowed, never the caller's list or plan."""
    wanted = None if spec.tools is None else frozenset(spec.tools)
    read_only = policy.mode == "read-only"

    def keep(name: str) -> bool:
        if name in _CALLERS_ONLY or (name == "task" and not nested):
            return False
        if wanted is not None and name not in wanted:
            return False
        return not read_only or registry.kind(name) == "read"

    return registry.filtered(keep)


def _worker_for(model: str, pool: Iterable[Worker]) -> str | None:
    """The pool worker an agent's `model` names: a worker's name or litellm id (with or without its
    provider), else the one worker whose name or model contains it (Claude's `sonnet`, `haiku`)."""
    workers = list(pool)
    want = model.strip().lower()
    for w in workers:
        if want in (w.name.lower(), w.model.lower(), w.model.split("/", 1)[-1].lower()):
            return w.name
    near = [w.name for w in workers if want in w.name.lower() or want in w.model.lower()]
    return near[0] if len(near) == 1 else None


def _tagged(emit: Emit, sid: str, call_id: str) -> Emit:
    def tagged(event: Event) -> None:
        emit(SubagentEvent(session_id=sid, parent_tool_use_id=call_id, inner=event))

    return tagged


def _least(a: float | None, b: float | None) -> float | None:
    given = [x for x in (a, b) if x is not None]
    return min(given) if given else None
