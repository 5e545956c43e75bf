"""The one routing objective: utility = normalised reward − λ·USD.

Training targets, model selection, the ES fitness, every baseline, `fugu router eval` and the serving router
all score a choice with this. Rewards are divided per task (a benchmark, or a repository) by that task's
scale, so a 1-10 judge score weighs as much as a 0/1 one; cost is USD per prompt; λ is therefore reward per
USD: λ = 0.5 says "one more dollar on a task is worth it if it raises its chance of success by over 0.5".

`Scores` is what every router (learned or baseline) hands the judge: a utility estimate at its own λ and the
cost it expects, so the estimate at any other λ is one subtraction. Pure numpy; never prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fugu_cli.router.calibrate import shrink_at
from fugu_cli.router.data import RewardMatrix, mean_costs

GRID_STEPS_PER_DECADE = 8  # λ sweep: 10^(k/8), so every data set (and every fold) shares grid values


def task_scales(data: RewardMatrix) -> dict[str, float]:
    """Reward scale per task: max(1, the largest |reward| of that task)."""
    tasks = np.array(data.tasks)
    out: dict[str, float] = {}
    for t in dict.fromkeys(data.tasks):
        block = data.reward[tasks == t]
        top = float(np.nanmax(np.abs(block))) if np.isfinite(block).any() else 1.0
        out[t] = max(1.0, top)
    return out


def normalised(data: RewardMatrix, scales: dict[str, float] | None = None) -> np.ndarray:
    """[N, W] rewards divided by their task's scale (NaN stays NaN). Tasks missing from `scales` use their
    own scale, so an external data set is normalised like the training one was."""
    own = task_scales(data)
    given = scales or {}
    rows = np.array([given.get(t, own[t]) for t in data.tasks]) if data.n else np.ones(0)
    return np.asarray(data.reward / rows[:, None]) if data.n else data.reward.copy()


def utility(data: RewardMatrix, lam: float, scales: dict[str, float] | None = None) -> np.ndarray:
    """[N, W] normalised reward − λ × USD cost (NaN where unmeasured)."""
    return np.asarray(normalised(data, scales) - lam * data.costs())


def choose(util: np.ndarray, tie_break: np.ndarray | None = None) -> np.ndarray:
    """[N] the best worker per row (NaN and -inf never win); exact ties go to the larger `tie_break`."""
    u = np.where(np.isnan(util), -np.inf, util)
    if tie_break is None:
        return np.asarray(u.argmax(axis=1))
    best = u.max(axis=1, keepdims=True)
    masked = np.where(u >= best, tie_break[None, :], -np.inf)
    return np.asarray(masked.argmax(axis=1))


@dataclass(frozen=True, eq=False)
class Scores:
    """A router's view of N prompts: `base[i, j]` is its utility estimate for worker j at λ = `lam0`, and
    `cost` ([N, W] or [W]) the USD it expects j to spend, so its estimate at λ is base − (λ − lam0)·cost.
    A learned router also moves its per-prompt evidence `head` [N, W] by a shrink that depends on λ
    (`shrinks`: a table per column, see calibrate.py). `tie` ([W]) orders exact ties (the training mean)."""

    base: np.ndarray
    cost: np.ndarray
    lam0: float = 0.0
    tie: np.ndarray | None = field(default=None)
    head: np.ndarray | None = field(default=None)
    shrinks: tuple[tuple[tuple[float, float], ...], ...] = ()  # [W] a shrink table per column

    def at(self, lam: float) -> np.ndarray:
        cost = self.cost if self.cost.ndim == 2 else self.cost[None, :]
        out = self.base - (lam - self.lam0) * cost
        if self.head is not None and self.shrinks:
            now = np.array([shrink_at(t, lam) for t in self.shrinks])
            then = np.array([shrink_at(t, self.lam0) for t in self.shrinks])
            out = out + (now - then)[None, :] * self.head
        return np.asarray(out)

    def choices(self, lam: float) -> np.ndarray:
        return choose(self.at(lam), self.tie)

    def rows(self, idx: np.ndarray) -> Scores:
        cost = self.cost[idx] if self.cost.ndim == 2 else self.cost
        head = None if self.head is None else self.head[idx]
        return Scores(self.base[idx], cost, self.lam0, self.tie, head, self.shrinks)


def lambda_grid(costs: np.ndarray, extra: tuple[float, ...] = ()) -> list[float]:
    """0, then 10^(k/8) from where cost barely matters (10⁻³ reward for the priciest worker's cost) to where
    it decides everything (3 reward for the cheapest priced worker's), plus `extra` values (the checkpoint's
    λ). `costs`: mean USD per worker. Without costs, only λ = 0 means anything."""
    c = np.asarray(costs, dtype=float)
    pos = c[c > 0]
    if pos.size == 0:
        return sorted({0.0, *extra})
    lo, hi = 1e-3 / pos.max(), 3.0 / pos.min()
    step = GRID_STEPS_PER_DECADE
    ks = range(int(np.floor(np.log10(lo) * step)), int(np.ceil(np.log10(hi) * step)) + 1)
    grid = [10 ** (k / step) for k in ks]
    return sorted({0.0, *(round(g, 12) for g in grid), *extra})


def best_single(train: RewardMatrix, lam: float = 0.0) -> int:
    """Index of the worker with the highest mean utility at λ on the training part (ties: the cheaper)."""
    util = np.nanmean(utility(train, lam), axis=0)
    return int(choose(util[None, :], -mean_costs(train))[0])
