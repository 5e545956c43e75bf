"""Router training stage 2: sep-CMA-ES (`es.py`) over the escalation policy (`escalation.py`), from its
supervised start, maximising the one objective on replayed episodes (`replay.py`, with a check of the
accuracy the policy assumes: `TrainConfig.check_accuracy`): the mean over each data set's λ sweep of
normalised reward − λ·USD per episode, each prompt's divided by 1 + λ·its mean cost as calibration weighs
it. The text term reads stage 1's out-of-fold deviations (from heads that never fitted those rows), so the
search cannot learn to trust text that only fits its own training rows. The result is kept only if it beats
the start on the dev part, in the same replayed worlds.

Pure numpy (the fitness is cheap: a few hundred parameters, vectorised episodes). Never prints: progress
goes to `log` and `on_generation`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from fugu_cli.router.calibrate import centred, col_mean, row_groups
from fugu_cli.router.data import RewardMatrix, mean_costs
from fugu_cli.router.es import ESConfig, GenerationStats, popsize_for, run_sep_cma
from fugu_cli.router.escalation import EscalationPolicy, ReplayPolicy, shrinks_at
from fugu_cli.router.executor import Executor
from fugu_cli.router.objective import lambda_grid
from fugu_cli.router.replay import ReplayConfig, ReplayEnv
from fugu_cli.router.train import Log, TrainConfig, Trained, dev_indices


@dataclass(frozen=True)
class Stage2:
    es: ESConfig = field(default_factory=lambda: ESConfig(generations=30))
    batch: int = 256  # prompts per data set per fitness call (0: all of them, deterministic)
    worlds: int = 2  # replayed worlds (seeds) per fitness call; the dev comparison uses 4 times as many
    lambda_stride: int = (
        2  # every n-th λ of each data set's sweep (the 8-per-decade grid is finer than needed)
    )


@dataclass(frozen=True, eq=False)
class _Group:
    """The rows of one data set (the workers measured together) as replayed episodes."""

    cols: np.ndarray  # [Wg] the group's workers among the checkpoint's
    envs: tuple[ReplayEnv, ...]  # one per world
    dev: np.ndarray  # [n, Wg] the text's out-of-fold deviation
    cost: np.ndarray  # [Wg] expected USD an attempt
    row_cost: np.ndarray  # [n] each prompt's mean cost over its workers
    lams: tuple[float, ...]
    shrinks: np.ndarray  # [L, Wg] s_j(λ)


@dataclass(eq=False)
class EscalationFitness:
    """Mean weighted utility over the groups' λ sweeps and worlds of the policy `start.with_vector(x)`; each
    generation samples the same `batch` rows of each group for every candidate."""

    start: EscalationPolicy
    groups: list[_Group]
    batch: int = 256
    seed: int = 0

    def __call__(self, x: np.ndarray, generation: int) -> float:
        policy = self.start.with_vector(x)
        rng = np.random.default_rng(self.seed * 1_000_003 + generation)
        total, weight = 0.0, 0
        for g in self.groups:
            n = len(g.row_cost)
            rows = np.arange(n) if self.batch <= 0 or n <= self.batch else rng.choice(n, self.batch, False)
            total += group_utility(policy.columns(g.cols), g, rows) * len(rows)
            weight += len(rows)
        return total / max(weight, 1)


def group_utility(policy: EscalationPolicy, g: _Group, rows: np.ndarray) -> float:
    """Mean over the group's λ and worlds of the rows' weighted episode utility (the whole sweep of each
    world played as one batch: every row once per λ)."""
    n = len(rows)
    lam = np.repeat(np.asarray(g.lams), n)  # [L·n]
    tasks = np.tile(rows, len(g.lams))
    play = ReplayPolicy(policy, g.dev, np.repeat(g.shrinks, n, axis=0), g.cost, lam, policy.attempts)
    weight = 1.0 / (1.0 + lam * g.row_cost[tasks])
    out = [
        float(((ep.reward - lam * ep.cost) * weight).mean())
        for ep in (e.run_batch(play, tasks) for e in g.envs)
    ]
    return float(np.mean(out)) if out else 0.0


def oof_deviation(oof: np.ndarray, util: np.ndarray) -> np.ndarray:
    """[N, W] the text's deviation from out-of-fold τ·log q, centred per prompt and per worker as
    calibration centres it (0 where a row has no out-of-fold estimate)."""
    dev = centred(np.nan_to_num(oof, nan=0.0, neginf=0.0), util)
    dev = dev - col_mean(np.where(np.isnan(util), np.nan, dev))[None, :]
    return np.asarray(np.where(np.isfinite(oof), dev, 0.0))


def build_groups(
    train: RewardMatrix,
    trained: Trained,
    rows: np.ndarray,
    stage: Stage2,
    worlds: int,
    seed: int,
) -> list[_Group]:
    """One `_Group` per set of workers measured together, over the training rows `rows`."""
    d, policy = trained.decision, trained.escalation
    assert policy is not None
    util = trained.util
    dev_all = oof_deviation(trained.oof, util) if trained.oof is not None else np.zeros_like(util)
    tables = d.tables(np.arange(len(trained.workers))) if d.prior else ()
    group, _ = row_groups(util[rows])
    out = []
    for gi in range(int(group.max()) + 1 if len(group) else 0):
        idx = rows[group == gi]
        cols = np.flatnonzero(~np.isnan(util[idx[0]]))
        part = train.subset(idx).only([train.workers[c] for c in cols])
        cfg = ReplayConfig(check_accuracy=policy.check_accuracy, max_attempts=policy.attempts)
        envs = tuple(
            ReplayEnv(part, replace(cfg, seed=seed + w), scales=trained.scales) for w in range(worlds)
        )
        cost = mean_costs(part)
        lams = tuple(lambda_grid(cost, extra=(d.lam,))[:: max(1, stage.lambda_stride)])
        width = len(cols)
        sub_tables = [tables[c] for c in cols] if tables else []
        shrinks = np.stack([shrinks_at(sub_tables, lam, width) for lam in lams])
        row_cost = part.costs().mean(axis=1)
        out.append(_Group(cols, envs, dev_all[idx][:, cols], cost, row_cost, lams, shrinks))
    return out


def run_stage2(
    trained: Trained,
    train: RewardMatrix,
    cfg: TrainConfig,
    stage: Stage2,
    log: Log,
    on_generation: Callable[[GenerationStats], None] | None = None,
    executor: Executor | None = None,
) -> tuple[Trained, list[GenerationStats]]:
    """sep-CMA-ES over the escalation policy; kept only if its dev utility beats the supervised start's."""
    start = trained.escalation
    if start is None:
        raise ValueError("stage 2 needs stage 1's supervised escalation policy")
    fit_idx, dev_idx = dev_indices(train.n, cfg)
    groups = build_groups(train, trained, fit_idx, stage, stage.worlds, cfg.seed)
    fitness = EscalationFitness(start, groups, stage.batch, cfg.seed)
    judge = EscalationFitness(
        start, build_groups(train, trained, dev_idx, stage, 4 * stage.worlds, cfg.seed + 101), 0, cfg.seed
    )
    x0 = start.vector()
    size = stage.es.popsize or popsize_for(x0.size)
    log(f"stage 2: sep-CMA-ES over the escalation policy's {x0.size} parameters, population {size}")
    result = run_sep_cma(fitness, x0, stage.es, on_generation, executor)
    before, after = judge(x0, 0), judge(result.x, 0)
    keep = after > before + 1e-12  # a tie on a small dev part is no evidence: keep the start
    log(f"stage 2: dev utility {before:.4f} -> {after:.4f} ({'kept' if keep else 'discarded'})")
    trained.metrics.update(
        es_dev_before=before, es_dev_after=after, es_kept=keep, es_generations=len(result.history)
    )
    policy = start.with_vector(result.x) if keep else start
    return replace(trained, escalation=policy), result.history
