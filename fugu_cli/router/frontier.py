"""Reward–cost frontiers: the non-decreasing upper convex hull of (cost, reward) points (RouterBench), a
router's hull against the single models' hull at every budget, AIQ, CPT(x) and APGR.

Mixing two operating points (send each prompt to one or the other at random) reaches any point between them,
so a router's reachable set is the hull of its λ-sweep points, just as the single models' hull includes every
random mix of two models. Pure numpy; never prints.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Point = tuple[float, float]  # (cost, reward)
TOL = 1e-9


def upper_hull(points: Sequence[Point]) -> list[Point]:
    """The non-decreasing upper convex hull, cheapest point first: a point is kept only if no mix of others
    reaches at least its reward for at most its cost; after the highest reward the curve is flat."""
    best: dict[float, float] = {}
    for c, r in points:
        best[c] = max(r, best.get(c, -np.inf))
    pts = sorted(best.items())
    hull: list[Point] = []
    for p in pts:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    top = int(np.argmax([r for _, r in hull]))
    return hull[: top + 1]


def _cross(a: Point, b: Point, c: Point) -> float:
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def value_at(hull: Sequence[Point], budget: float) -> float:
    """The hull's reward at `budget` (NaN below its cheapest point: not reachable; flat after its last)."""
    if budget < hull[0][0] - TOL:
        return float("nan")
    if budget >= hull[-1][0]:
        return hull[-1][1]
    xs, ys = zip(*hull, strict=True)
    return float(np.interp(budget, xs, ys))


def cost_for(hull: Sequence[Point], reward: float) -> float:
    """The least budget at which the hull reaches `reward` (inf when it never does)."""
    if reward <= hull[0][1] + TOL:
        return hull[0][0]
    for (c0, r0), (c1, r1) in itertools.pairwise(hull):
        if r1 >= reward - TOL:
            return c0 + (c1 - c0) * (reward - r0) / (r1 - r0)
    return float("inf")


@dataclass(frozen=True)
class Versus:
    """A method's hull against a reference hull on the reference's budget range."""

    min_gap: float  # least (method − reference) reward over every budget; NaN budgets count as unreachable
    max_gap: float  # most reward the method gains at one budget
    unreachable: list[float]  # budgets in range the method cannot spend as little as
    max_saving: float  # most cost saved for the same reward: 1 − cost / the reference's cost for that reward
    budgets: int

    @property
    def on_or_above(self) -> bool:
        return not self.unreachable and self.min_gap >= -TOL

    def to_json(self) -> dict[str, object]:
        return {
            "min_gap": self.min_gap,
            "max_gap": self.max_gap,
            "max_saving": self.max_saving,
            "unreachable_budgets": self.unreachable,
            "on_or_above": self.on_or_above,
            "budgets_checked": self.budgets,
        }


def versus(method: Sequence[Point], reference: Sequence[Point]) -> Versus:
    """Compare at every budget from the reference's cheapest point to the dearer of both hulls' last points:
    both curves are piecewise linear, so checking every vertex of either is exact."""
    lo = reference[0][0]
    hi = max(reference[-1][0], method[-1][0])
    budgets = sorted({c for c, _ in [*method, *reference] if lo - TOL <= c <= hi + TOL})
    gaps, unreachable = [], []
    for b in budgets:
        m = value_at(method, b)
        if np.isnan(m):
            unreachable.append(b)
        else:
            gaps.append(m - value_at(reference, b))
    # at equal reward, at every reward where either curve bends (cost over cost is linear-fractional between
    # them, so its extremes are there); a reward below the cheapest model's saves nothing: no single model is
    # that bad, and one the method never reaches saves nothing either
    rewards = sorted({r for _, r in [*method, *reference] if r >= reference[0][1] - TOL})
    savings = [
        1.0 - cost_for(method, r) / ref_c
        for r in rewards
        if 0 < (ref_c := cost_for(reference, r)) < float("inf") and cost_for(method, r) < float("inf")
    ]
    return Versus(
        min_gap=float(min(gaps)) if gaps else float("nan"),
        max_gap=float(max(gaps)) if gaps else float("nan"),
        unreachable=unreachable,
        max_saving=float(max(savings)) if savings else 0.0,
        budgets=len(budgets),
    )


def aiq(hull: Sequence[Point], lo: float, hi: float) -> float:
    """RouterBench's AIQ: mean reward of the hull over budgets [lo, hi] (flat beyond its ends)."""
    if hi - lo <= TOL:
        return value_at(hull, max(lo, hull[0][0]))
    grid = np.linspace(lo, hi, 1001)
    vals = np.array([value_at(hull, max(b, hull[0][0])) for b in grid])
    return float(np.trapezoid(vals, grid) / (hi - lo))


@dataclass(frozen=True)
class Gap:
    """The weak (cheapest) and strong (best) single models that PGR is measured between."""

    weak: Point
    strong: Point

    @classmethod
    def of(cls, singles: Sequence[Point]) -> Gap | None:
        weak = min(singles, key=lambda p: (p[0], -p[1]))
        strong = max(singles, key=lambda p: (p[1], -p[0]))
        if strong[1] - weak[1] <= TOL or strong[0] - weak[0] <= TOL:
            return None
        return cls(weak, strong)

    def pgr(self, reward: float) -> float:
        return (reward - self.weak[1]) / (self.strong[1] - self.weak[1])


def cpt(hull: Sequence[Point], gap: Gap, x: float) -> float | None:
    """CPT(x) on a cost axis: the share of the weak→strong cost span a method needs to recover x of the
    reward gap (RouteLLM's "% strong calls", where each call of a model costs the same)."""
    c = cost_for(hull, gap.weak[1] + x * (gap.strong[1] - gap.weak[1]))
    if c == float("inf"):
        return None
    return float(max(0.0, (c - gap.weak[0]) / (gap.strong[0] - gap.weak[0])))


def apgr_cost(hull: Sequence[Point], gap: Gap) -> float:
    """Area under PGR over the weak→strong cost span (the single models' straight line scores 0.5)."""
    shares = np.linspace(0.0, 1.0, 1001)
    budgets = gap.weak[0] + shares * (gap.strong[0] - gap.weak[0])
    vals = np.array([value_at(hull, b) for b in budgets])
    pgr = np.nan_to_num((vals - gap.weak[1]) / (gap.strong[1] - gap.weak[1]), nan=0.0)
    return float(np.trapezoid(pgr, shares))


def apgr_calls(score: np.ndarray, r_strong: np.ndarray, r_weak: np.ndarray) -> float | None:
    """RouteLLM's APGR for two workers: send the prompts with the highest `score` (strong − weak preference)
    to the strong one, sweep the share of strong calls from 0 to 1, integrate the gap recovered."""
    pgr = _pgr_by_calls(score, r_strong, r_weak)
    if pgr is None:
        return None
    x = np.arange(len(pgr)) / (len(pgr) - 1)
    return float(np.trapezoid(pgr, x))


def cpt_calls(score: np.ndarray, r_strong: np.ndarray, r_weak: np.ndarray, x: float) -> float | None:
    """RouteLLM's CPT(x): the least share of strong calls (highest `score` first) recovering x of the gap."""
    pgr = _pgr_by_calls(score, r_strong, r_weak)
    if pgr is None:
        return None
    hit = np.flatnonzero(pgr >= x - 1e-12)
    return float(hit[0] / (len(pgr) - 1)) if hit.size else None


def _pgr_by_calls(score: np.ndarray, r_strong: np.ndarray, r_weak: np.ndarray) -> np.ndarray | None:
    n = len(score)
    gap = r_strong.mean() - r_weak.mean() if n else 0.0
    if n == 0 or abs(gap) < 1e-12:
        return None
    order = np.argsort(-score, kind="stable")
    gain = np.concatenate([[0.0], np.cumsum((r_strong - r_weak)[order])]) / n  # [n+1]
    return np.asarray(gain / gap)
