"""Turning a fitted head into decisions that fall back to the best mix where the text says little.

The head's τ·log q estimates each worker's utility up to a constant per prompt, but it is fitted on a few
hundred noisy outcomes. A decision therefore starts from the worker's mean utility on the training data (its
`prior`: at λ this alone picks the best single worker for the budget, and the hull of the λ sweep is the best
random mix of two) and adds the head's per-prompt deviation from its own mean (`centre`) scaled by a shrink
s(λ) ∈ [0, 1]. s is chosen per λ on out-of-fold estimates (prompts the head never fitted): the s whose gain
over s = 0 has the best lower confidence bound (mean − z·standard error over the held-out prompts), and 0
unless some bound is above 0, so per-prompt evidence moves a choice only at budgets where it clearly earned
that on prompts the head never saw. At each λ a prompt's utility is divided by 1 + λ·(its mean cost), so no
prompt's dollars drown the others' rewards when data sets with very different costs are trained together.
The raw head (s = 1, no prior) is measured too, for the record: `allow_raw` lets it win when it beats the
calibrated decisions on average over the λ sweep (it has no fallback, so by default it may not). Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_SHRINKS = (0.0, 0.25, 0.5, 0.75, 1.0)
CONFIDENCE_Z = 1.0  # how many standard errors a shrink's held-out gain over the best mix must clear


Table = tuple[tuple[float, float], ...]  # (λ, s): s from this λ up to the next


@dataclass(frozen=True)
class Calibrated:
    prior: tuple[float, ...]  # [W] mean utility at λ0 on the training data
    shrinks: Table  # from every held-out prompt: for workers of no group (unseen ones)
    group_shrinks: tuple[Table, ...]  # one per group of workers measured together (a data set)
    worker_group: tuple[int, ...]  # [W] each worker's group (-1: none)
    raw: bool  # the raw head won: no prior, s = 1
    score: float  # mean held-out utility over the λ grid (each prompt's divided by 1 + λ·its mean cost)
    options: dict[str, float]  # mean held-out utility over the grid of each fixed option, for the record


def mean_utility(util: np.ndarray, score: np.ndarray) -> float:
    """Mean of `util` [N, W] at the argmax of `score` over the measured (non-NaN) cells of each row."""
    return float(row_utility(util, score).mean()) if len(util) else 0.0


def row_utility(util: np.ndarray, score: np.ndarray) -> np.ndarray:
    """[N] `util` at the argmax of `score` over the measured (non-NaN) cells of each row."""
    masked = np.where(np.isnan(util), -np.inf, score)
    pick = masked.argmax(axis=1)
    return np.asarray(util[np.arange(len(util)), pick])


def centred(scores: np.ndarray, util: np.ndarray) -> np.ndarray:
    """Scores minus each row's mean over its measured workers (0 where unmeasured)."""
    s = np.where(np.isnan(util), np.nan, scores)
    return np.asarray(np.nan_to_num(s - np.nanmean(s, axis=1, keepdims=True)))


def col_mean(a: np.ndarray) -> np.ndarray:
    """[W] mean over the non-NaN cells of each column (0 for an empty column)."""
    seen = ~np.isnan(a)
    return np.asarray(np.where(seen, a, 0.0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1))


def calibrate(
    est: np.ndarray,
    util: np.ndarray,
    cost: np.ndarray,
    *,
    prior: np.ndarray,
    mean_cost: np.ndarray,
    lam0: float,
    grid: Sequence[float],
    shrinks: Sequence[float] = DEFAULT_SHRINKS,
    z: float = CONFIDENCE_Z,
    allow_raw: bool = False,
) -> Calibrated:
    """`est` [N, W]: the head's held-out τ·log q; `util` [N, W]: utility at `lam0` of the same rows (NaN where
    not measured); `cost` [N, W]: their USD; `prior`, `mean_cost` [W] from the training data. Each group of
    workers measured together (one data set, where the text may say much or little) gets its own shrinks."""
    dev = centred(est, util)
    dev = dev - col_mean(np.where(np.isnan(util), np.nan, dev))[None, :]
    group, worker_group = row_groups(util)
    members = [np.flatnonzero(group == g) for g in range(int(group.max()) + 1)] if len(group) else []
    tables: list[list[tuple[float, float]]] = [[] for _ in [None, *members]]  # [all rows, group 0, ...]
    total, options = 0.0, {f"shrink={s:g}": 0.0 for s in shrinks} | {"raw": 0.0}
    row_cost = col_mean(np.where(np.isnan(util), np.nan, cost).T)  # [N] mean cost of each prompt's workers
    for lam in grid:
        u = util - (lam - lam0) * cost
        base = prior - (lam - lam0) * mean_cost
        weight = 1.0 / (1.0 + lam * row_cost)
        per_row = {s: weight * row_utility(u, base[None, :] + s * dev) for s in (0.0, *shrinks)}
        for i, rows in enumerate([np.arange(len(util)), *members]):
            s_best = _pick({s: v[rows] for s, v in per_row.items()}, shrinks, z)
            tables[i].append((float(lam), s_best))
            total += float(per_row[s_best][rows].sum()) / len(util) if i else 0.0
        for s in shrinks:
            options[f"shrink={s:g}"] += float(per_row[s].mean()) / len(grid)
        raw_rows = weight * row_utility(u, est - (lam - lam0) * mean_cost[None, :])
        options["raw"] += float(raw_rows.mean()) / len(grid)
    score = total / len(grid)
    raw = allow_raw and options["raw"] > score + 1e-12
    return Calibrated(
        prior=tuple(float(p) for p in prior),
        shrinks=((0.0, 1.0),) if raw else _merged(tables[0]),
        group_shrinks=() if raw else tuple(_merged(t) for t in tables[1:]),
        worker_group=() if raw else tuple(int(g) for g in worker_group),
        raw=raw,
        score=options["raw"] if raw else score,
        options=options,
    )


def row_groups(util: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([N] group of each row: rows measuring the same workers, [W] each worker's group: the one with the
    most rows measuring it, -1 if none)."""
    seen = ~np.isnan(util)
    if len(util) == 0:
        return np.zeros(0, dtype=int), np.full(util.shape[1], -1)
    _, group = np.unique(seen, axis=0, return_inverse=True)
    group = np.asarray(group).reshape(-1)
    counts = np.stack([seen[group == g].sum(axis=0) for g in range(int(group.max()) + 1)])  # [G, W]
    worker_group = np.where(counts.max(axis=0) > 0, counts.argmax(axis=0), -1)
    return group, worker_group


def _pick(per_row: dict[float, np.ndarray], shrinks: Sequence[float], z: float) -> float:
    # without 0 in the grid there is no fallback to weigh against: the best mean wins
    if 0.0 not in shrinks:
        return max(shrinks, key=lambda x: float(per_row[x].mean()))
    return _confident(per_row, z)


def _confident(per_row: dict[float, np.ndarray], z: float) -> float:
    """The shrink whose gain over 0 has the highest lower bound mean − z·SE, or 0 if none is above 0."""
    base = per_row[0.0]
    best, bound = 0.0, 0.0
    for s, got in per_row.items():
        gain = got - base
        if s == 0.0 or len(gain) < 2:
            continue
        low = float(gain.mean() - z * gain.std(ddof=1) / np.sqrt(len(gain)))
        if low > bound + 1e-12:
            best, bound = s, low
    return best


def _merged(table: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Drop grid points that repeat the shrink before them: the table is a step function."""
    out: list[tuple[float, float]] = []
    for lam, s in table:
        if not out or out[-1][1] != s:
            out.append((lam, s))
    return tuple(out)


def shrink_at(shrinks: Sequence[tuple[float, float]], lam: float) -> float:
    """s(λ): the shrink of the last table entry at or below λ (the first entry's below it)."""
    if not shrinks:
        return 1.0
    s = shrinks[0][1]
    for at, value in shrinks:
        if at <= lam + 1e-12:
            s = value
    return s
