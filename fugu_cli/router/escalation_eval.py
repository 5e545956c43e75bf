"""Judging the escalation policy by replay (`replay.py`) on held-out prompts: its λ sweep's (cost, reward)
points, each averaged over several replayed worlds (seeds), and their hull against the single models' hull and
the one-shot router's. Several held-out parts (folds, each with its own checkpoint) are pooled at each λ.

The single models are replayed in the same worlds (one attempt each), so where a measured reward is soft (a
pass@1 mean, a 1-10 judge score) and an attempt's success is a draw, policies and singles see the same draws;
on 0/1 outcomes the replayed singles are the measured ones exactly. Pure numpy; never prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fugu_cli.router import frontier as fr
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.escalation import EscalationPolicy, ReplayPolicy, shrinks_at
from fugu_cli.router.replay import Batch, BatchPolicy, ReplayConfig, ReplayEnv

NOTE = (
    "replayed: an attempt succeeds and costs as measured, a check errs with probability "
    "1 − verifier_accuracy "
    "independently per attempt, the answer is the last attempt; points are means over `worlds` seeds"
)


@dataclass(frozen=True, eq=False)
class EscalationPart:
    """One held-out part and the policy judged on it (over the part's columns)."""

    test: RewardMatrix
    policy: EscalationPolicy
    dev: np.ndarray  # [N, W] the text's deviation per prompt (zeros: no text)
    tables: tuple[tuple[tuple[float, float], ...], ...]  # [W] shrink tables (empty: text unused)
    cost: np.ndarray  # [W] USD the policy expects an attempt by each worker to cost
    source: str  # where the policy came from: "checkpoint" or "supervised (...)"


@dataclass(frozen=True)
class Replay:
    accuracy: float = 0.9
    worlds: int = 5
    seed: int = 0


def sweep(
    parts: Sequence[EscalationPart],
    grid: Sequence[float],
    replay: Replay,
    scales: Mapping[str, float] | None = None,
) -> tuple[list[list[float]], list[tuple[float, float]]]:
    """([[λ, cost, reward, attempts]] over all parts' prompts, each part's rows played by its own policy;
    [(cost, reward)] of each single worker's one attempt, in the same worlds)."""
    sums = np.zeros((len(grid), 3))
    singles = np.zeros((len(parts[0].test.workers), 2))
    total = 0
    for part in parts:
        n, width = part.test.n, len(part.test.workers)
        k = part.policy.attempts
        envs = [
            ReplayEnv(part.test, ReplayConfig(replay.accuracy, k, None, replay.seed + s), scales=scales)
            for s in range(replay.worlds)
        ]
        shrink = np.stack([shrinks_at(part.tables, lam, width) for lam in grid])  # [L, W]
        lam = np.repeat(np.asarray(grid, dtype=float), n)  # the sweep as one batch: every row once per λ
        play = ReplayPolicy(part.policy, part.dev, np.repeat(shrink, n, axis=0), part.cost, lam, k)
        tasks = np.tile(np.arange(n), len(grid))
        once = one_attempt(np.repeat(np.arange(width), n))  # every row once per worker
        for env in envs:
            ep = env.run_batch(play, tasks)
            per = np.stack([ep.cost, ep.reward, ep.attempts]).reshape(3, len(grid), n).sum(axis=2)  # [3, L]
            sums += per.T / replay.worlds
            one = env.run_batch(once, np.tile(np.arange(n), width))
            singles += (
                np.stack([ep_sum(one.cost, width, n), ep_sum(one.reward, width, n)], axis=1) / replay.worlds
            )
        total += n
    points = [[float(lam), *(sums[i] / max(total, 1)).tolist()] for i, lam in enumerate(grid)]
    return points, [(float(c), float(r)) for c, r in singles / max(total, 1)]


def one_attempt(workers: np.ndarray) -> BatchPolicy:
    """One attempt by `workers[i]` in episode i, then stop: the single models as a batch policy."""

    def play(batch: Batch) -> np.ndarray:
        return workers if batch.k == 0 else np.full(len(workers), -1)

    return play


def ep_sum(values: np.ndarray, width: int, n: int) -> np.ndarray:
    """[W] the sum over each worker's n rows of a batch laid out worker by worker."""
    return np.asarray(values.reshape(width, n).sum(axis=1))


def escalation_report(
    parts: Sequence[EscalationPart],
    grid: Sequence[float],
    lam: float,
    replay: Replay,
    frontier: Mapping[str, Any],
    scales: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The report's "escalation" entry. `frontier` is the judge's frontier report (single models' hull and
    the one-shot router's)."""
    grid = sorted({*grid, lam})
    points, singles = sweep(parts, grid, replay, scales)
    hull = fr.upper_hull([(c, r) for _, c, r, _ in points])
    ref = fr.upper_hull(singles)  # the single models in the same replayed worlds
    measured = [(float(c), float(r)) for c, r in frontier["single_hull"]]
    one_shot = [(float(c), float(r)) for c, r in frontier["methods"]["router"]["hull"]]
    at = next(p for p in points if p[0] == lam)
    lo, hi = ref[0][0], ref[-1][0]
    return {
        "verifier_accuracy": replay.accuracy,
        "assumed_accuracy": parts[0].policy.check_accuracy,
        "max_attempts": parts[0].policy.attempts,
        "worlds": replay.worlds,
        "policy": parts[0].source,
        "note": NOTE,
        "points": points,
        "frontier": [{"cost": c, "reward": r} for c, r in hull],
        "at_lambda": {"lambda": lam, "cost": at[1], "reward": at[2], "attempts": at[3]},
        "aiq": fr.aiq(hull, lo, hi),
        "single_aiq": fr.aiq(ref, lo, hi),
        "single_hull": [list(p) for p in ref],
        "vs_single_hull": fr.versus(hull, ref).to_json(),
        "vs_measured_single_hull": fr.versus(hull, measured).to_json(),
        "vs_one_shot": fr.versus(hull, one_shot).to_json(),
    }


def part_for(
    test: RewardMatrix,
    policy: EscalationPolicy,
    known: np.ndarray,
    dev: np.ndarray | None,
    tables: tuple[tuple[tuple[float, float], ...], ...],
    cost: np.ndarray,
    source: str,
) -> EscalationPart:
    """A part from a policy over some workers: `known` [W] each judged column's index in the policy (−1:
    unseen)."""
    width = len(test.workers)
    return EscalationPart(
        test,
        policy.columns(known),
        np.zeros((test.n, width)) if dev is None else dev,
        tables,
        np.asarray(cost, dtype=float),
        source,
    )
