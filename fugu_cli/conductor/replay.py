"""What a workflow earns under replay: its steps are attempts in `router.replay.ReplayEnv`, and these rules
turn them into one outcome. Every trainer, baseline and `fugu conductor eval` figure that says "replay" means
exactly these rules:

- A workflow that does not parse or validate (`workflow.parse`, against the workers the task was shown)
  earns 0 and costs nothing; it runs no step.
- A worker step is one attempt by its worker on the task: the k-th step of worker w in one workflow (counted
  through recursion) is the environment's attempt k of w (`ReplayEnv.outcome`), so one seed is one world for
  every workflow of a group (common random numbers). Its measured cost is paid whatever happens.
- A step is right when its own attempt succeeded, or, failing that, with probability `carry_accuracy`, when
  it may see (its access list, and for steps of a sub-workflow whatever their conductor step may see) a step
  that is right: it recognises and carries the right answer. That draw is seeded per (seed, task, step path).
- A `conductor` step (recursion) below `max_depth` asks `replan` for a sub-workflow of its subtask, which is
  validated like any plan (one level deeper) and run by these rules; the step is right when the sub-workflow's
  last step is. Without `replan`, at the depth limit, or when the sub-plan is invalid, the step is wrong
  (fugu's runner fails such a step too) and costs nothing.
- The workflow is right when its last step is. Its reward is the research's: 0 invalid, 0.5 valid but wrong,
  1 right, minus λ × its USD cost (the router's objective and unit, `router.objective`).

Pure numpy; never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fugu_cli.conductor.workflow import CONDUCTOR, PlanError, Workflow, parse
from fugu_cli.router.replay import ReplayEnv

Replan = Callable[[int, str, int], str | None]  # (task, subtask, depth) -> the conductor's reply, or None


@dataclass(frozen=True)
class Rules:
    carry_accuracy: float = 0.8  # P(a step whose own attempt failed is right, when it may see a right step)
    lam: float = 0.0  # reward per USD
    max_depth: int = 1  # conductor steps allowed in workflows up to this depth (0: no recursion)

    def __post_init__(self) -> None:
        if not 0.0 <= self.carry_accuracy <= 1.0:
            raise ValueError(f"carry_accuracy must be in [0, 1], not {self.carry_accuracy}")
        if self.lam < 0 or self.max_depth < 0:
            raise ValueError("lam and max_depth must not be negative")


@dataclass(frozen=True)
class Outcome:
    """One workflow's result under replay."""

    valid: bool
    right: bool
    cost: float
    workers: tuple[str, ...] = ()  # the worker of every attempt made, in order (recursion included)
    error: str | None = None
    final_worker: str | None = None  # the last step's worker (CONDUCTOR for a recursion step)

    def reward(self, lam: float) -> float:
        if not self.valid:
            return 0.0
        return (1.0 if self.right else 0.5) - lam * self.cost


@dataclass
class _Run:
    env: ReplayEnv
    task: int
    rules: Rules
    workers: Sequence[str]
    replan: Replan | None
    attempts: dict[int, int] = field(default_factory=dict)
    made: list[str] = field(default_factory=list)
    cost: float = 0.0

    def attempt(self, worker: str) -> bool:
        w = self.env.workers.index(worker)
        k = self.attempts.get(w, 0)
        self.attempts[w] = k + 1
        limit = self.env.config.max_attempts
        success, _ = self.env.outcome(self.task, w, k % limit)  # past the limit, draws repeat
        self.cost += float(self.env.cost[self.task, w])
        self.made.append(worker)
        return success

    def carried(self, path: tuple[int, ...]) -> bool:
        rng = np.random.default_rng([self.env.config.seed, self.task, 7919, *path])
        return bool(rng.random() < self.rules.carry_accuracy)

    def run(self, workflow: Workflow, depth: int, path: tuple[int, ...], inherited: bool) -> bool:
        """Whether the last step of `workflow` is right; `inherited`: a right step is visible to all."""
        right: list[bool] = []
        for i, step in enumerate(workflow.steps):
            sees = inherited or any(right[a] for a in step.access)
            here = (*path, i)
            if step.worker == CONDUCTOR:
                right.append(self.recurse(step.subtask, depth, here, sees))
            else:
                right.append(self.attempt(step.worker) or (sees and self.carried(here)))
        return right[-1]

    def recurse(self, subtask: str, depth: int, path: tuple[int, ...], sees: bool) -> bool:
        if self.replan is None or depth >= self.rules.max_depth:
            return False
        text = self.replan(self.task, subtask, depth + 1)
        if text is None:
            return False
        try:
            sub = parse(text, self.workers, allow_conductor=depth + 1 < self.rules.max_depth)
        except PlanError:
            return False
        return self.run(sub, depth + 1, path, sees)


def score_text(
    env: ReplayEnv,
    task: int,
    text: str,
    workers: Sequence[str],
    rules: Rules,
    replan: Replan | None = None,
) -> Outcome:
    """The outcome of a conductor's reply `text` on `task`, shown only `workers` (names in `env.workers`)."""
    try:
        workflow = parse(text, workers, allow_conductor=rules.max_depth > 0)
    except PlanError as e:
        return Outcome(False, False, 0.0, error=str(e))
    return score(env, task, workflow, workers, rules, replan)


def score(
    env: ReplayEnv,
    task: int,
    workflow: Workflow,
    workers: Sequence[str],
    rules: Rules,
    replan: Replan | None = None,
) -> Outcome:
    """The outcome of a valid `workflow` on `task` (its steps name workers in `env.workers`)."""
    run = _Run(env, task, rules, workers, replan)
    right = run.run(workflow, 0, (), False)
    final = workflow.steps[-1].worker
    return Outcome(True, right, run.cost, tuple(run.made), None, final)
