"""Ultra mode: a conductor plans a workflow, isolated agents run it, the final changes land, memory grows.

`Conductor.run_turn` is what a Session calls for a turn in ultra mode. When the conductor cannot produce a
valid workflow (after one repair round) it says so and runs the session's own fugu-mode turn. Never prints.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fugu_cli import memory
from fugu_cli.agent import AgentDeps, Limits, TurnIO
from fugu_cli.conductor.local import LocalPlanner
from fugu_cli.conductor.planner import Planner, PlanOutcome, PlanRequest, Plans, total_usage
from fugu_cli.conductor.runner import Frame, Runner, RunnerConfig, RunnerDeps, StepOutcome
from fugu_cli.conductor.workflow import Workflow
from fugu_cli.events import Emit, Notice, WorkflowPlanned
from fugu_cli.ledger import Ledger
from fugu_cli.store import Store
from fugu_cli.tools import ApprovalRequest, ToolContext
from fugu_cli.types import FallBack, Message, TurnResult, TurnStatus, Worker

log = logging.getLogger("fugu")

__all__ = ["Conductor", "ConductorConfig", "ConductorDeps", "Workflow"]


@dataclass
class ConductorConfig:
    root: Path
    conductor: str  # the pool worker that plans (the prompted conductor)
    home: Path  # FUGU_HOME: worktrees and saved patches live under it
    max_depth: int = 2
    step_limits: Limits = field(default_factory=Limits)
    system_prompt: str = ""  # for workflow steps
    plan: Workflow | None = None  # --plan: run this instead of asking the conductor
    trained: Path | None = (
        None  # `[ultra] conductor = "local:PATH"`: this model plans; `conductor` if it cannot
    )


@dataclass(frozen=True)
class ConductorDeps:
    agent: AgentDeps  # the template every agent of a workflow starts from
    store: Store
    pool: Sequence[Worker]


@dataclass(frozen=True)
class _Landing:
    status: TurnStatus
    error: str | None
    patch: str


class Conductor:
    def __init__(self, deps: ConductorDeps, config: ConductorConfig) -> None:
        self.deps = deps
        self.config = config
        self._trained: LocalPlanner | None = None  # kept across turns: its model loads once

    @property
    def sid(self) -> str:
        return self.deps.agent.session_id

    def run_turn(
        self,
        text: str,
        turn: int,
        io: TurnIO,
        *,
        agent: AgentDeps | None = None,
        before_apply: Callable[[], None] | None = None,
        record: Callable[[Message], None] = lambda m: None,
    ) -> TurnResult | FallBack:
        """Plan (or take the --plan workflow), run it, apply the final step's changes, update memory.
        Without a usable plan: a `FallBack`, and the session runs the turn in fugu mode. `agent`: this turn's
        parts (the session's settings for the turn applied); the conductor's own template otherwise."""
        agent = agent or self.deps.agent
        store = self.deps.store
        wf = self.next_workflow()
        notes = memory.context_block(store, self.sid, self.config.root)
        planner = self._planner()
        plan: PlanOutcome | None = None
        workflow = self.config.plan
        if workflow is None:
            ledger = Ledger(store, self.sid, f"wf{wf}.plan")
            plan = planner.plan(PlanRequest(text, notes), ledger, turn, io)
            if plan.workflow is None:
                return self._fall_back(plan, io)
            workflow = plan.workflow
        source = "conductor" if plan is not None else "plan-file"
        io.emit(
            WorkflowPlanned(
                session_id=self.sid,
                workflow=wf,
                steps=tuple(workflow.to_json()),
                source=source,
                conductor=plan.planner if plan is not None else "",
            )
        )
        base = self._base(wf, io.emit)
        worktrees = self.config.home / "worktrees"
        if base is not None:
            _clean_up_after_killed_runs(self.config.root, worktrees, self.sid, io.emit)
        runner = Runner(
            RunnerDeps(agent=agent, store=store, pool=self.deps.pool, planner=planner, io=io),
            RunnerConfig(
                root=self.config.root,
                worktrees=self.config.home / "worktrees" / self.sid,
                limits=self.config.step_limits,
                system_prompt=self.config.system_prompt,
            ),
        )
        frame = Frame(workflow=wf, turn=turn, request=text, base=base, memory=notes, scope=f"wf{wf}")
        from fugu_cli.tools import git

        with git.hold_worktrees(runner.config.worktrees):  # a later run knows these are live, not left over
            outcomes = runner.run(workflow, frame)
        _remove_empty_dirs(runner.config.worktrees)
        landing = self._land(wf, outcomes, base, io.emit, before_apply, agent.tool_ctx)
        applied = (
            memory.facts_from_patch(landing.patch, outcomes[-1].worker) if landing.status == "success" else []
        )
        memory.distil(store, self.sid, wf, [s for o in outcomes for s in o.scopes], applied)
        final = outcomes[-1]
        record(Message(role="assistant", content=final.answer, worker=final.worker))
        usage, workers, steps = total_usage([*([plan] if plan else []), *outcomes])
        return TurnResult(
            status=landing.status,
            result=final.answer if landing.error is None else landing.error,
            session_id=self.sid,
            num_turns=steps,
            usage=usage,
            workers=workers,
            error=landing.error,
        )

    def _planner(self) -> Plans:
        prompted = Planner(self.deps.agent, self.config.conductor, self.deps.pool, self.config.max_depth)
        if self.config.trained is None:
            return prompted
        if self._trained is None:
            self._trained = LocalPlanner(self.config.trained, prompted)
        return self._trained

    def next_workflow(self) -> int:
        numbers = [
            int(m.group(1)) for s in self.deps.store.scopes(self.sid) if (m := re.match(r"wf(\d+)\.", s))
        ]
        return max([*numbers, memory.last_workflow(self.deps.store, self.sid)]) + 1

    def _fall_back(self, plan: PlanOutcome, io: TurnIO) -> TurnResult | FallBack:
        if io.cancel is not None and io.cancel.is_set():
            return TurnResult(
                "interrupted", "interrupted by the user", self.sid, plan.num_turns, plan.usage, plan.workers
            )
        what = "invalid twice" if plan.num_turns >= 2 else "unusable"
        reason = f"the conductor's plan was {what} ({plan.error}); running in fugu mode"
        return FallBack(reason=reason, usage=plan.usage, workers=plan.workers, num_turns=plan.num_turns)

    def _base(self, wf: int, emit: Emit) -> str | None:
        from fugu_cli.tools import git

        try:
            return git.checkpoint(self.config.root, f"{self.sid}-wf{wf}")
        except Exception as e:  # not a git repository: no worktrees, so no isolation of files
            log.warning("no git worktrees for workflow %s", wf, exc_info=e)
            emit(
                Notice(
                    session_id=self.sid,
                    level="warning",
                    text=f"no git worktrees ({e}); the steps share {self.config.root}",
                )
            )
            return None

    def _land(
        self,
        wf: int,
        outcomes: Sequence[StepOutcome],
        base: str | None,
        emit: Emit,
        before_apply: Callable[[], None] | None,
        ctx: ToolContext,
    ) -> _Landing:
        """Apply the final step's changes to the user's tree, or leave it untouched and save the patch."""
        final = outcomes[-1]
        for o in outcomes[:-1]:
            if o.patch.strip() and o.index not in final.carried:
                path = self._save(f"wf{wf}-s{o.index}", o.patch)
                emit(
                    Notice(
                        session_id=self.sid,
                        level="warning",
                        text=f"step {o.index}'s changes reach no later step and were not applied: {path}",
                    )
                )
        if final.status != "success":
            error = f"step {final.index} ({final.worker}) did not finish: {final.answer}"
            if final.cumulative.strip():
                path = self._save(f"wf{wf}", final.cumulative)
                error += f"; its changes were not applied and are saved at {path}"
            return _Landing(final.status, error, "")
        patch = final.cumulative
        if base is None or not patch.strip():
            return _Landing("success", None, "")
        refused = self._refused(patch, ctx)
        if refused:
            return _Landing(
                "error_during_execution",
                f"{refused}; the changes are saved at {self._save(f'wf{wf}', patch)}",
                "",
            )
        if before_apply is not None:
            before_apply()
        from fugu_cli.tools import git

        ok, message = git.apply_patch(self.config.root, patch)
        if not ok:
            path = self._save(f"wf{wf}", patch)
            error = (
                f"the workflow's changes conflict with your files, which were left untouched. {message}\n"
                f"The patch is saved at {path}; apply it by hand with: git apply --3way {path}"
            )
            return _Landing("error_during_execution", error, "")
        emit(Notice(session_id=self.sid, level="info", text=message))
        return _Landing("success", None, patch)

    def _refused(self, patch: str, ctx: ToolContext) -> str | None:
        decision = ctx.policy.check("edit", "edit")
        if decision == "allow":
            return None
        if decision == "ask" and ctx.approve is not None:
            files = memory.patch_files(patch)
            request = ApprovalRequest(
                agent="conductor",
                tool="apply_workflow",
                kind="edit",
                summary=f"apply the workflow's changes to {len(files)} file(s): {', '.join(files)[:200]}",
                detail=patch,
                prefix="edit",
            )
            answer = ctx.approve(request)
            if answer == "always" and ctx.grant is not None:
                ctx.grant("edit")
            if answer in ("yes", "always"):
                return None
            return "you declined the workflow's changes"
        return "the permission mode does not allow edits, so the workflow's changes were not applied"

    def _save(self, name: str, patch: str) -> Path:
        path = self.config.home / "patches" / f"{self.sid}-{name}.patch"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(patch, encoding="utf-8")
        return path


def _clean_up_after_killed_runs(root: Path, worktrees: Path, sid: str, emit: Emit) -> None:
    """Worktrees a killed run left behind (their folder is no longer held) are removed before a new one."""
    from fugu_cli.tools import git

    try:
        removed = git.remove_stale_worktrees(root, worktrees)
    except Exception as e:  # cleaning up must never stop the workflow
        log.warning("removing stale worktrees failed", exc_info=e)
        emit(Notice(session_id=sid, level="warning", text=f"could not remove stale worktrees: {e}"))
        return
    if removed:
        text = f"removed {len(removed)} worktree(s) a killed run left"
        emit(Notice(session_id=sid, level="info", text=text))


def _remove_empty_dirs(top: Path) -> None:
    """The worktrees are gone; drop the directories that held them (anything left in them stays)."""
    if not top.is_dir():
        return
    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            d.rmdir()
    if not any(top.iterdir()):
        top.rmdir()
