"""A replay environment over measured outcomes: policies that act on evidence (a check's verdict on an
attempt) are run, scored and trained offline, with no key, on any reward matrix.

The rules (every policy, baseline and trainer that says "replay" means exactly these):
- An attempt by worker w on task t succeeds with probability equal to its normalised measured reward r[t, w]
  (a 0/1 outcome replays exactly; a soft one, e.g. a pass@1 mean, is a seeded Bernoulli draw per attempt). Its
  realised reward is 1 on success, 0 otherwise. It costs the measured cost c[t, w] (0 where none is recorded).
- Attempt k of w on t draws from its own seeded uniform numbers, fixed per (seed, t, w, k): every policy
  judged with one seed sees the same world (common random numbers), so differences between policies are not
  noise.
- A check observes each attempt: it says "pass" for a success and "fail" for a failure with probability
  `check_accuracy`, and the opposite otherwise, independently per attempt (also fixed per (seed, t, w, k)).
- The episode's answer is its last attempt: its reward is that attempt's realised reward, its cost the sum of
  every attempt's cost. A policy stops (returns None) or is stopped by `max_attempts` or the per-task budget
  (no attempt starts once the money spent reaches `budget_usd`).
- Rewards are normalised per task (`objective.normalised`; `scales` as a checkpoint recorded them, else the
  data's own).

`run` plays one task with a `Policy` (one state at a time); `run_batch` plays many tasks in lockstep with a
`BatchPolicy` (arrays: one attempt index for all), by exactly the same rules and random numbers, so the two
give the same episodes; trainers use the batch form. Pure numpy; never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.objective import normalised


@dataclass(frozen=True)
class ReplayConfig:
    check_accuracy: float = 0.9  # P(the check's verdict is the truth), per attempt, independent
    max_attempts: int = 3  # attempts per task (the first included)
    budget_usd: float | None = None  # per task: no attempt starts once this much is spent
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.check_accuracy <= 1.0:
            raise ValueError(f"check_accuracy must be in [0, 1], not {self.check_accuracy}")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclass(frozen=True)
class Observed:
    """What a policy may see of one attempt: who made it, what it cost, and the check's verdict."""

    worker: int
    cost: float
    passed: bool


@dataclass(frozen=True)
class State:
    """An episode so far, as a policy sees it (never the truth of an attempt)."""

    task: int
    attempts: tuple[Observed, ...]
    spent: float

    @property
    def tried(self) -> frozenset[int]:
        return frozenset(a.worker for a in self.attempts)

    @property
    def last_passed(self) -> bool | None:
        return self.attempts[-1].passed if self.attempts else None


Policy = Callable[[State], "int | None"]  # the next worker to attempt, or None to stop


@dataclass(frozen=True)
class Episode:
    task: int
    workers: tuple[int, ...]
    checks: tuple[bool, ...]
    successes: tuple[bool, ...]
    reward: float  # the last attempt's realised reward (0 when no attempt was made)
    cost: float  # every attempt's cost


class ReplayEnv:
    """Attempts and checks on the tasks of `data` under `config`'s rules (see the module docstring)."""

    def __init__(
        self,
        data: RewardMatrix,
        config: ReplayConfig | None = None,
        *,
        scales: Mapping[str, float] | None = None,
    ) -> None:
        self.data = data
        self.config = config or ReplayConfig()
        r = normalised(data, dict(scales or {}))
        if np.isnan(r).any():
            raise ValueError(f"{data.name or 'the data'} has unmeasured cells: replay needs data.complete()")
        self.p_success = np.clip(r, 0.0, 1.0)  # [N, W]
        self.cost = data.costs()  # [N, W]
        shape = (data.n, len(data.workers), self.config.max_attempts)
        rng = np.random.default_rng(self.config.seed)
        self._u_success = rng.random(shape)
        self._u_check = rng.random(shape)

    @property
    def n(self) -> int:
        return self.data.n

    @property
    def workers(self) -> tuple[str, ...]:
        return self.data.workers

    def outcome(self, task: int, worker: int, k: int) -> tuple[bool, bool]:
        """(succeeded, the check passed) for attempt `k` (0-based, counted per task) by `worker`."""
        success = bool(self._u_success[task, worker, k] < self.p_success[task, worker])
        right = bool(self._u_check[task, worker, k] < self.config.check_accuracy)
        return success, success if right else not success

    def run(self, policy: Policy, task: int) -> Episode:
        """One episode of `policy` on `task`."""
        cfg = self.config
        seen: list[Observed] = []
        successes: list[bool] = []
        spent = 0.0
        while len(seen) < cfg.max_attempts:
            if cfg.budget_usd is not None and seen and spent >= cfg.budget_usd:
                break
            choice = policy(State(task, tuple(seen), spent))
            if choice is None:
                break
            w = int(choice)
            success, passed = self.outcome(task, w, len(seen))
            cost = float(self.cost[task, w])
            spent += cost
            seen.append(Observed(w, cost, passed))
            successes.append(success)
        reward = 1.0 if successes and successes[-1] else 0.0
        return Episode(
            task,
            tuple(a.worker for a in seen),
            tuple(a.passed for a in seen),
            tuple(successes),
            reward,
            spent,
        )

    def evaluate(self, policy: Policy, tasks: Sequence[int] | None = None) -> tuple[float, float]:
        """(mean reward, mean USD cost) of `policy` over `tasks` (all by default)."""
        idx = range(self.n) if tasks is None else tasks
        episodes = [self.run(policy, t) for t in idx]
        if not episodes:
            return 0.0, 0.0
        return (
            float(np.mean([e.reward for e in episodes])),
            float(np.mean([e.cost for e in episodes])),
        )

    def run_batch(self, policy: BatchPolicy, tasks: Sequence[int] | np.ndarray | None = None) -> Episodes:
        """Episodes of `policy` on `tasks` (all by default) in lockstep: the same episodes `run` plays."""
        cfg = self.config
        idx = np.arange(self.n) if tasks is None else np.asarray(tasks, dtype=np.int64)
        n, k_max = len(idx), cfg.max_attempts
        workers = np.full((n, k_max), -1, dtype=np.int64)
        passed = np.zeros((n, k_max), dtype=bool)
        spent, reward = np.zeros(n), np.zeros(n)
        active = np.ones(n, dtype=bool)
        for k in range(k_max):
            if cfg.budget_usd is not None and k > 0:
                active &= spent < cfg.budget_usd
            if not active.any():
                break
            choice = np.asarray(policy(Batch(idx, k, workers[:, :k], passed[:, :k], spent.copy(), active)))
            active &= choice >= 0
            w = np.where(active, choice, 0)
            success = self._u_success[idx, w, k] < self.p_success[idx, w]
            right = self._u_check[idx, w, k] < cfg.check_accuracy
            workers[:, k] = np.where(active, w, -1)
            passed[:, k] = active & np.where(right, success, ~success)
            spent += np.where(active, self.cost[idx, w], 0.0)
            reward = np.where(active, success.astype(float), reward)
        return Episodes(idx, workers, passed, reward, spent)


@dataclass(frozen=True)
class Batch:
    """Many episodes after `k` attempts each, as a `BatchPolicy` sees them (never the truth of an attempt):
    `workers` and `passed` are [N, k] (worker −1 where an episode had stopped), `spent` [N] USD so far, and
    `active` [N] whether each episode still runs (the policy's answer is read only there)."""

    tasks: np.ndarray
    k: int
    workers: np.ndarray
    passed: np.ndarray
    spent: np.ndarray
    active: np.ndarray

    @property
    def last_passed(self) -> np.ndarray:
        """[N] the last attempt's verdict (False before the first attempt)."""
        if self.k == 0:
            return np.zeros(len(self.tasks), dtype=bool)
        return np.asarray(self.passed[:, -1])


BatchPolicy = Callable[[Batch], np.ndarray]  # [N] the next worker of each episode, or −1 to stop


@dataclass(frozen=True, eq=False)
class Episodes:
    """`run_batch`'s episodes: [N] tasks, [N, K] workers (−1: no attempt) and verdicts, [N] reward, cost."""

    tasks: np.ndarray
    workers: np.ndarray
    checks: np.ndarray
    reward: np.ndarray
    cost: np.ndarray

    @property
    def attempts(self) -> np.ndarray:
        """[N] attempts made per episode."""
        return np.asarray((self.workers >= 0).sum(axis=1))


def single(worker: int) -> Policy:
    """Always one attempt by `worker`: the one-shot choice of a single model."""

    def policy(state: State) -> int | None:
        return worker if not state.attempts else None

    return policy


def cascade(order: Sequence[int]) -> Policy:
    """Cheap-first cascade: try `order` in turn until the check passes (each worker at most once)."""
    chain = tuple(int(w) for w in order)

    def policy(state: State) -> int | None:
        if state.last_passed:
            return None
        k = len(state.attempts)
        return chain[k] if k < len(chain) else None

    return policy
