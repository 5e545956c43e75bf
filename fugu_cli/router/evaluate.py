"""Judging routers on prompts they never trained on: every method (the learned router and the baselines) comes
as `Scores`, and each is swept over λ with the same code, giving its (cost, reward) points, its hull, the gap
to the single models' hull at every budget, AIQ, CPT(50%) / CPT(80%) and APGR, overall and per task.

Rewards are normalised per task (`objective.py`). Pure numpy; never prints (`report.py` renders).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fugu_cli.router import frontier as fr
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.objective import Scores, normalised

ORACLE_NOTE = (
    "per-prompt best worker in hindsight: overstates what any router can reach when outcomes are noisy"
)
HEADLINE = ("router", "best_single", "knn", "logreg")


def judge(
    test: RewardMatrix,
    methods: Mapping[str, Scores],
    *,
    lam: float,
    lambdas: Sequence[float],
    scales: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The full report (JSON-ready). `methods` must hold "router" and "best_single"; `lam` is the router's
    own λ (its headline point); `lambdas` the sweep."""
    reward = normalised(test, dict(scales or {}))
    cost = test.costs()
    grid = sorted({*lambdas, lam})
    picks = {name: np.stack([s.choices(x) for x in grid]) for name, s in methods.items()}  # [L, N]
    at = grid.index(lam)
    report: dict[str, Any] = {
        "data": test.name,
        "n_test": test.n,
        "workers": list(test.workers),
        "lambda": lam,
        "cost_source": test.cost_source or "none",
    }
    for name, p in picks.items():
        report[name] = _figure(reward, cost, test.cost is not None, p[at])
    single = int(np.bincount(picks["best_single"][at], minlength=len(test.workers)).argmax())
    report["best_single"]["worker"] = test.workers[single]
    report["random"] = _mean_figure(reward.mean(), cost.mean(), test.cost is not None)
    report["oracle"] = {**_oracle(reward, cost, test.cost is not None), "note": ORACLE_NOTE}
    rows = np.arange(test.n)
    report["frontier"] = frontier_report(reward, cost, picks, grid, rows)
    report["groups"] = {
        g: group_report(reward, cost, picks, grid, idx, methods, at) for g, idx in _groups(test)
    }
    report["choices"] = {
        pid: test.workers[j] for pid, j in zip(test.prompt_ids, picks["router"][at], strict=True)
    }
    return report


def _figure(reward: np.ndarray, cost: np.ndarray, has_cost: bool, choice: np.ndarray) -> dict[str, Any]:
    rows = np.arange(len(choice))
    return _mean_figure(reward[rows, choice].mean(), cost[rows, choice].mean(), has_cost)


def _mean_figure(reward: float, cost: float, has_cost: bool) -> dict[str, Any]:
    return {"reward": float(reward), "cost": float(cost) if has_cost else None}


def _oracle(reward: np.ndarray, cost: np.ndarray, has_cost: bool) -> dict[str, Any]:
    best = reward.max(axis=1, keepdims=True)
    cheapest = np.where(reward >= best, cost, np.inf).min(axis=1)
    return _mean_figure(best.mean(), cheapest.mean(), has_cost)


def _groups(test: RewardMatrix) -> list[tuple[str, np.ndarray]]:
    tasks = np.array(test.tasks)
    out = [("all", np.arange(test.n))]
    if len(set(test.tasks)) > 1:
        out += [(t, np.flatnonzero(tasks == t)) for t in sorted(set(test.tasks))]
    return out


def points_of(
    reward: np.ndarray, cost: np.ndarray, picks: np.ndarray, grid: Sequence[float], rows: np.ndarray
) -> list[list[float]]:
    """[[λ, cost, reward]] of one method's choices `picks` [L, N] on `rows`."""
    out = []
    for i, lam in enumerate(grid):
        ch = picks[i, rows]
        out.append([lam, float(cost[rows, ch].mean()), float(reward[rows, ch].mean())])
    return out


def frontier_report(
    reward: np.ndarray,
    cost: np.ndarray,
    picks: Mapping[str, np.ndarray],
    grid: Sequence[float],
    rows: np.ndarray,
) -> dict[str, Any]:
    """Singles and their hull, then per method: λ points, hull, AIQ, the gap to the singles' hull at every
    budget, CPT(50%), CPT(80%) and cost-axis APGR. "random_mix" is the hull of best_single's sweep: the best
    random mix of two single workers for the budget, chosen on training data."""
    singles = [(float(cost[rows, j].mean()), float(reward[rows, j].mean())) for j in range(reward.shape[1])]
    ref = fr.upper_hull(singles)
    gap = fr.Gap.of(singles)
    lo, hi = ref[0][0], ref[-1][0]
    out: dict[str, Any] = {
        "lambdas": list(grid),
        "singles": [[c, r] for c, r in singles],
        "single_hull": [list(p) for p in ref],
        "single_aiq": fr.aiq(ref, lo, hi),
        "methods": {},
    }
    for name, p in picks.items():
        pts = points_of(reward, cost, p, grid, rows)
        hull = fr.upper_hull([(c, r) for _, c, r in pts])
        entry: dict[str, Any] = {"points": pts, "hull": [list(h) for h in hull]}
        entry.update(_curve_metrics(hull, ref, gap, lo, hi))
        out["methods"][name] = entry
        if name == "best_single":
            mix = {"points": pts, "hull": entry["hull"], **_curve_metrics(hull, ref, gap, lo, hi)}
            out["methods"]["random_mix"] = mix
    return out


def _curve_metrics(
    hull: list[fr.Point], ref: list[fr.Point], gap: fr.Gap | None, lo: float, hi: float
) -> dict[str, Any]:
    return {
        "aiq": fr.aiq(hull, lo, hi),
        "vs_single_hull": fr.versus(hull, ref).to_json(),
        "cpt50": fr.cpt(hull, gap, 0.5) if gap else None,
        "cpt80": fr.cpt(hull, gap, 0.8) if gap else None,
        "apgr": fr.apgr_cost(hull, gap) if gap else None,
    }


def group_report(
    reward: np.ndarray,
    cost: np.ndarray,
    picks: Mapping[str, np.ndarray],
    grid: Sequence[float],
    idx: np.ndarray,
    methods: Mapping[str, Scores],
    at: int,
) -> dict[str, Any]:
    """One task's figures: reward at the router's λ (`grid[at]`) per method, oracle, and APGR / CPT per
    method: by share of strong calls (RouteLLM) when there are two workers, else along the cost axis when
    there is a cost."""
    out: dict[str, Any] = {"n": len(idx), "apgr": {}, "cpt50": {}, "cpt80": {}}
    r, c = reward[idx], cost[idx]
    out["oracle"] = float(r.max(axis=1).mean())
    two = reward.shape[1] == 2
    singles = [(float(c[:, j].mean()), float(r[:, j].mean())) for j in range(r.shape[1])]
    gap = fr.Gap.of(singles)
    strong = int(np.argmax(r.mean(0))) if two else 0
    for name, p in picks.items():
        out[name] = float(r[np.arange(len(idx)), p[at, idx]].mean())
        if two:
            diff = _preference(methods[name].rows(idx), strong)
            out["apgr"][name] = fr.apgr_calls(diff, r[:, strong], r[:, 1 - strong])
            out["cpt50"][name] = fr.cpt_calls(diff, r[:, strong], r[:, 1 - strong], 0.5)
            out["cpt80"][name] = fr.cpt_calls(diff, r[:, strong], r[:, 1 - strong], 0.8)
        elif gap is not None:
            hull = fr.upper_hull([(pc, pr) for _, pc, pr in points_of(reward, cost, p, grid, idx)])
            out["apgr"][name] = fr.apgr_cost(hull, gap)
            out["cpt50"][name] = fr.cpt(hull, gap, 0.5)
            out["cpt80"][name] = fr.cpt(hull, gap, 0.8)
    out["apgr"]["random"] = 0.5 if (two or gap is not None) else None
    return out


def _preference(scores: Scores, strong: int) -> np.ndarray:
    """[N] how much more a method believes in the strong worker than the weak one, prompt by prompt: a
    learned router's full per-prompt evidence (its decision may shrink it to nothing at λ = 0), else its
    scores at λ = 0."""
    u = scores.at(0.0) if scores.head is None else scores.head
    return np.asarray(u[:, strong] - u[:, 1 - strong])


def concat_scores(parts: Sequence[Scores]) -> Scores:
    """Scores of several held-out parts (k folds) as one, to judge the pooled prompts at once."""
    n = [len(s.base) for s in parts]
    costs = [s.cost if s.cost.ndim == 2 else np.tile(s.cost, (k, 1)) for s, k in zip(parts, n, strict=True)]
    lam0 = parts[0].lam0
    base = [s.at(lam0) for s in parts]
    if any(s.head is not None for s in parts):  # learned: each part keeps its own shrink table
        return _Pooled(parts, np.vstack(base), np.vstack(costs), lam0)
    return Scores(np.vstack(base), np.vstack(costs), lam0, parts[0].tie)


class _Pooled(Scores):
    """Several parts' scores judged as one (optionally only rows `idx`), each part moving with λ by its own
    shrink table."""

    def __init__(
        self,
        parts: Sequence[Scores],
        base: np.ndarray,
        cost: np.ndarray,
        lam0: float,
        idx: np.ndarray | None = None,
    ) -> None:
        heads = [p.head if p.head is not None else np.zeros_like(p.base) for p in parts]
        head = np.vstack(heads) if idx is None else np.vstack(heads)[idx]
        super().__init__(base, cost, lam0, parts[0].tie, head)
        object.__setattr__(self, "parts", tuple(parts))
        object.__setattr__(self, "idx", idx)

    def at(self, lam: float) -> np.ndarray:
        full = np.vstack([p.at(lam) for p in self.parts])  # type: ignore[attr-defined]
        return full if self.idx is None else full[self.idx]  # type: ignore[attr-defined]

    def rows(self, idx: np.ndarray) -> Scores:
        own = self.idx  # type: ignore[attr-defined]
        keep = idx if own is None else own[idx]
        return _Pooled(self.parts, self.base[idx], self.cost[idx], self.lam0, keep)  # type: ignore[attr-defined]
