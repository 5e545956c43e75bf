"""Runs a workflow: each step an isolated agent (own transcript, own ledger scope, own git worktree).

A step starts once the steps in its access list have finished, so independent steps run concurrently (threads:
the work is I/O). A step sees the request, its subtask, memory, and the answers and diffs of its access list.
Never prints and never touches the user's tree: applying the final step's changes is the caller's business.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.conductor.planner import PlanRequest, Plans, fixed_picker, total_usage
from fugu_cli.conductor.workflow import CONDUCTOR, Step, Workflow
from fugu_cli.events import (
    Emit,
    Event,
    WorkflowAgentEvent,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
)
from fugu_cli.ledger import Ledger
from fugu_cli.store import Store
from fugu_cli.tools import Answer, ApprovalRequest, ToolContext
from fugu_cli.types import Message, TurnStatus, Usage, Worker, WorkerUsage

log = logging.getLogger("fugu")

MAX_DIFF_CHARS = 20_000


@dataclass(frozen=True, kw_only=True)
class StepOutcome:
    index: int
    worker: str
    subtask: str
    status: TurnStatus
    answer: str
    patch: str  # this step's own changes, relative to the tree it started from
    cumulative: str  # everything its tree holds beyond the workflow's base (what the final apply uses)
    usage: Usage
    workers: Mapping[str, WorkerUsage]
    num_turns: int
    elapsed_s: float
    scopes: tuple[str, ...]  # ledger scopes of its agents (a recursion step has several)
    notes: tuple[str, ...] = ()
    # the steps whose changes its tree holds: itself and, transitively, its inputs
    carried: tuple[int, ...] = ()


@dataclass(frozen=True)
class Frame:
    """One workflow being run: where it stands in the session and the commit its worktrees start from."""

    workflow: int
    turn: int
    request: str
    base: str | None  # None: not a git repository, steps share the user's directory
    memory: str = ""
    depth: int = 0
    scope: str = "wf1"
    parent_step: int | None = None


@dataclass(frozen=True)
class StepJob:
    """One step about to run: its place in the workflow, what it may see, the diffs its tree starts with."""

    index: int
    step: Step
    inputs: tuple[StepOutcome, ...]  # the outcomes of its access list
    patches: tuple[str, ...]  # the changes of every step its tree carries, in step order
    frame: Frame
    started: float = field(default_factory=time.monotonic)

    @property
    def scope(self) -> str:
        return f"{self.frame.scope}.s{self.index}"


@dataclass(frozen=True)
class RunnerDeps:
    agent: AgentDeps  # template: llm, tools, policy, approver, workers, session id
    store: Store
    pool: Sequence[Worker]
    planner: Plans
    io: TurnIO  # the turn's events and cancel flag


@dataclass(frozen=True)
class RunnerConfig:
    root: Path
    worktrees: Path  # FUGU_HOME/worktrees/<session>
    limits: Limits = field(default_factory=Limits)
    system_prompt: str = ""


class Runner:
    def __init__(self, deps: RunnerDeps, config: RunnerConfig) -> None:
        self.deps = deps
        self.config = config
        self._git_lock = threading.Lock()
        self._approve_lock = threading.Lock()

    def run(self, workflow: Workflow, frame: Frame) -> list[StepOutcome]:
        """Every step's outcome, in step order. A step whose inputs failed still runs, told so.

        A step's worktree holds the changes of its access list and, transitively, of theirs (a diff applies
        only to the tree it was made on); its transcript shows only its direct inputs' answers and diffs.
        """
        steps = workflow.steps
        done: dict[int, StepOutcome] = {}
        pending = list(range(len(steps)))
        with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix=f"fugu-{frame.scope}") as pool:
            running: dict[Future[StepOutcome], int] = {}
            while pending or running:
                for i in [i for i in pending if all(a in done for a in steps[i].access)]:
                    pending.remove(i)
                    inputs = tuple(done[a] for a in steps[i].access)
                    carried = sorted({k for o in inputs for k in o.carried})
                    job = StepJob(
                        index=i,
                        step=steps[i],
                        inputs=inputs,
                        patches=tuple(done[k].patch for k in carried),
                        frame=frame,
                    )
                    running[pool.submit(self._guarded, job)] = i
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    outcome = future.result()
                    i = running.pop(future)
                    carried = sorted({k for a in steps[i].access for k in done[a].carried} | {i})
                    done[i] = dataclasses.replace(outcome, carried=tuple(carried))
        return [done[i] for i in range(len(steps))]

    def _guarded(self, job: StepJob) -> StepOutcome:
        frame, step = job.frame, job.step
        self.deps.io.emit(
            WorkflowStepStarted(
                session_id=self.sid,
                workflow=frame.workflow,
                step=job.index,
                worker=step.worker,
                parent_step=frame.parent_step,
            )
        )
        try:
            outcome = self._recurse(job) if step.worker == CONDUCTOR else self._agent_step(job)
        except Exception as e:  # a broken step must not take the workflow down: later steps hear about it
            log.error("workflow step %s crashed", job.index, exc_info=e)
            outcome = _failed(job, f"step {job.index} failed: {type(e).__name__}: {e}")
        self.deps.io.emit(
            WorkflowStepFinished(
                session_id=self.sid,
                workflow=frame.workflow,
                step=job.index,
                worker=step.worker,
                status=outcome.status,
                cost_usd=outcome.usage.cost_usd,
                elapsed_s=outcome.elapsed_s,
                parent_step=frame.parent_step,
            )
        )
        return outcome

    @property
    def sid(self) -> str:
        return self.deps.agent.session_id

    def _agent_step(self, job: StepJob) -> StepOutcome:
        frame, step = job.frame, job.step
        dest = self.config.worktrees.joinpath(*job.scope.split("."))
        with self._worktree(dest, frame.base, job.patches) as (root, start, notes):
            ledger = Ledger(self.deps.store, self.sid, job.scope)
            messages = [
                Message(role="system", content=self.config.system_prompt),
                Message(role="user", content=step_prompt(frame, job.index, step, job.inputs, notes)),
            ]
            for m in messages:
                ledger.turn(frame.turn).message(m)
            deps = dataclasses.replace(self.deps.agent, tool_ctx=self._tool_ctx(root), ledger=ledger)
            io = TurnIO(emit=self._tagged(job.index), cancel=self.deps.io.cancel, stream=False)
            pick = fixed_picker(step.worker, self.deps.pool, f"workflow step {job.index}")
            result = Agent(deps).run(messages, frame.turn, pick, self.config.limits, io)
            patch, cumulative = self._diffs(root, start, frame.base)
        return StepOutcome(
            index=job.index,
            worker=step.worker,
            subtask=step.subtask,
            status=result.status,
            answer=result.result,
            patch=patch,
            cumulative=cumulative,
            usage=result.usage,
            workers=result.workers,
            num_turns=result.num_turns,
            elapsed_s=time.monotonic() - job.started,
            scopes=(job.scope,),
            notes=tuple(notes),
        )

    def _recurse(self, job: StepJob) -> StepOutcome:
        frame, step, i, scope = job.frame, job.step, job.index, job.scope
        req = PlanRequest(
            frame.request, frame.memory, frame.depth + 1, step.subtask, "\n\n".join(map(_granted, job.inputs))
        )
        plan_ledger = Ledger(self.deps.store, self.sid, f"{scope}.plan")
        plan = self.deps.planner.plan(req, plan_ledger, frame.turn, self.deps.io)
        scopes = (f"{scope}.plan",)
        if plan.workflow is None:
            return dataclasses.replace(
                _failed(job, f"the conductor could not plan step {i}: {plan.error}"),
                usage=plan.usage,
                workers=plan.workers,
                num_turns=plan.num_turns,
                scopes=scopes,
            )
        dest = self.config.worktrees.joinpath(*f"{scope}-base".split("."))
        start, notes = frame.base, list[str]()
        if any(p.strip() for p in job.patches):
            with self._worktree(dest, frame.base, job.patches) as (_, start, notes):
                pass
        self.deps.io.emit(
            WorkflowPlanned(
                session_id=self.sid,
                workflow=frame.workflow,
                steps=tuple(plan.workflow.to_json()),
                source="recursion",
                parent_step=i,
                conductor=plan.planner,
            )
        )
        sub = dataclasses.replace(frame, base=start, depth=frame.depth + 1, scope=scope, parent_step=i)
        outcomes = self.run(plan.workflow, sub)
        last = outcomes[-1]
        patch = last.cumulative
        cumulative = patch
        if frame.base is not None and start != frame.base:
            with self._worktree(dest, frame.base, [*job.patches, patch]) as (root, _, more):
                cumulative = self._diffs(root, frame.base, frame.base)[0]
                notes = [*notes, *more]
        usage, workers, turns = total_usage([plan, *outcomes])
        return StepOutcome(
            index=i,
            worker=CONDUCTOR,
            subtask=step.subtask,
            status=last.status,
            answer=last.answer,
            patch=patch,
            cumulative=cumulative,
            usage=usage,
            workers=workers,
            num_turns=turns,
            elapsed_s=time.monotonic() - job.started,
            scopes=scopes + tuple(s for o in outcomes for s in o.scopes),
            notes=tuple(notes),
        )

    def _tool_ctx(self, root: Path) -> ToolContext:
        template = self.deps.agent.tool_ctx
        policy = template.policy
        if policy.mode == "ask" and root != self.config.root:
            # edits in a private worktree touch none of the user's files: the final apply is what gets asked.
            # An "always" answered in a step holds for the rest of that step and, through the template's
            # `grant`, for the session's later turns.
            policy = dataclasses.replace(policy, mode="auto-edit")
        approve = template.approve
        if approve is None:
            return dataclasses.replace(template, root=root, before_edit=None, policy=policy)

        def serial(request: ApprovalRequest) -> Answer:
            with self._approve_lock:  # steps run concurrently; the user answers one question at a time
                return approve(request)

        return dataclasses.replace(template, root=root, before_edit=None, policy=policy, approve=serial)

    def _tagged(self, i: int) -> Emit:
        emit = self.deps.io.emit

        def tagged(event: Event) -> None:
            emit(WorkflowAgentEvent(session_id=self.sid, step=i, inner=event))

        return tagged

    def _worktree(self, dest: Path, base: str | None, patches: Sequence[str]) -> _Worktree:
        return _Worktree(self, dest, base, patches)

    def _diffs(self, root: Path, start: str | None, base: str | None) -> tuple[str, str]:
        if start is None or base is None:
            return "", ""
        from fugu_cli.tools import git

        patch = git.worktree_diff(root, start)
        return patch, patch if start == base else git.worktree_diff(root, base)


class _Worktree:
    """A worktree at `base` plus `patches`, checkpointed, removed on exit; yields (root, start, notes)."""

    def __init__(self, runner: Runner, dest: Path, base: str | None, patches: Sequence[str]) -> None:
        self.runner, self.dest, self.base, self.patches = (
            runner,
            dest,
            base,
            [p for p in patches if p.strip()],
        )

    def __enter__(self) -> tuple[Path, str | None, list[str]]:
        if self.base is None:
            return self.runner.config.root, None, []
        from fugu_cli.tools import git

        notes: list[str] = []
        with self.runner._git_lock:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            if self.dest.exists():
                git.remove_worktree(self.runner.config.root, self.dest)
            git.add_worktree(self.runner.config.root, self.dest, base=self.base)
            for n, patch in enumerate(self.patches):
                ok, message = git.apply_patch(self.dest, patch)
                if not ok:
                    notes.append(
                        f"input diff {n + 1} did not apply to your worktree ({message.splitlines()[0]})"
                    )
            start = self.base
            if self.patches:
                where = self.dest.relative_to(self.runner.config.worktrees).as_posix()
                label = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{self.runner.sid}-{where}-start")
                start = git.checkpoint(self.dest, label)
        return self.dest, start, notes

    def __exit__(self, *exc: object) -> None:
        if self.base is None:
            return
        from fugu_cli.tools import git

        with self.runner._git_lock:
            try:
                git.remove_worktree(self.runner.config.root, self.dest)
            except git.GitError:
                pass  # a leftover worktree is pruned by the next `git worktree prune`; the result matters


def step_prompt(frame: Frame, i: int, step: Step, inputs: Sequence[StepOutcome], notes: Sequence[str]) -> str:
    """A step's whole view of the world: the request, its subtask, memory and its granted inputs."""
    parts = [
        f"The user's request:\n{frame.request}",
        f"Your subtask (step {i} of the workflow):\n{step.subtask}",
    ]
    if frame.memory:
        parts.append(frame.memory)
    if inputs:
        parts.append("Results of the earlier steps you may see:\n\n" + "\n\n".join(map(_granted, inputs)))
    if notes:
        parts.append("Note: " + "; ".join(notes) + ". Their diffs are shown above; reconcile them by hand.")
    return "\n\n".join(parts)


def _granted(o: StepOutcome) -> str:
    head = f"Step {o.index} ({o.worker}, {o.status}) was asked: {o.subtask}\nIts answer:\n{o.answer.strip()}"
    if not o.patch.strip():
        return head + "\nIt changed no files."
    diff = o.patch if len(o.patch) <= MAX_DIFF_CHARS else o.patch[:MAX_DIFF_CHARS] + "\n[... diff cut ...]"
    return head + f"\nIts changes (already applied to your worktree):\n```diff\n{diff.rstrip()}\n```"


def _failed(job: StepJob, error: str) -> StepOutcome:
    return StepOutcome(
        index=job.index,
        worker=job.step.worker,
        subtask=job.step.subtask,
        status="error_during_execution",
        answer=error,
        patch="",
        cumulative="",
        usage=Usage(),
        workers={},
        num_turns=0,
        elapsed_s=time.monotonic() - job.started,
        scopes=(job.scope,),
    )
