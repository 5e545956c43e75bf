"""Router training stage 1: soft labels from the one objective, then only the head (and SVF scales) fitted.

Targets are p_i = softmax(ũ_i / τ) over the workers measured on prompt i, with ũ = (1 − α)·u + α·(the
worker's mean u) and u = normalised reward − λ·USD (`objective.py`). α is chosen by the held-out utility of
calibrated decisions (`calibrate.py`) over the λ sweep: out-of-fold on k inner folds of the training part
(small data), or on a 10% dev part (large data). The final head is fitted on 90% with early stopping on the
rest; phase B (`svf_train.py`) may then fine-tune SVF scales. Stage 2 (`trainer.py`) starts from the result.
Imports torch: import lazily. Never prints: progress goes to `on_log`.
"""

from __future__ import annotations

import copy
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fugu_cli.errors import UsageError
from fugu_cli.router.adamw import AdamW
from fugu_cli.router.backbone import Backbone, load_backbone
from fugu_cli.router.calibrate import (
    CONFIDENCE_Z,
    DEFAULT_SHRINKS,
    Calibrated,
    calibrate,
    centred,
    col_mean,
)
from fugu_cli.router.checkpoint import CheckpointWorker, Decision
from fugu_cli.router.data import RewardMatrix, mean_costs
from fugu_cli.router.describe import describe_workers
from fugu_cli.router.embed_cache import encode_prompts
from fugu_cli.router.escalation import EscalationPolicy, supervised
from fugu_cli.router.executor import Executor
from fugu_cli.router.features import description_embeddings
from fugu_cli.router.head import HeadConfig, SelectionHead
from fugu_cli.router.objective import lambda_grid, normalised, task_scales, utility
from fugu_cli.router.svf import SVFState
from fugu_cli.router.svf_train import fit_svf, kl_loss, svf_digest

Log = Callable[[str], None]
Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass(frozen=True)
class TrainConfig:
    backbone: str = "minilm"
    lam: float = 0.0  # λ, reward per USD: the objective the targets, selection and stage 2 use
    # Softmax temperatures of the targets (normalised-utility units) and, since one outcome per (prompt,
    # worker) is a noisy sample, shrinkage α of the targets toward the worker's mean: ũ = (1-α)·u + α·mean u.
    # The (α, τ) pair is picked from these grids by held-out utility (the first pair wins ties).
    taus: tuple[float, ...] = (0.05, 0.1, 0.2)
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    shrinks: tuple[float, ...] = DEFAULT_SHRINKS  # decision shrink toward the best single (calibrate.py)
    confidence_z: float = CONFIDENCE_Z  # standard errors a shrink's held-out gain must clear
    select_folds: int = 5  # inner folds for choosing α and the shrinks; 1: the dev part
    cv_max_rows: int = 20_000  # above this many training prompts, choose on the dev part
    describe_tasks: bool = True  # worker descriptions name the tasks a worker is strong on
    rank: int = 12
    lr: float = 3e-3
    weight_decay: float = 1e-2
    epochs: int = 300
    batch_size: int = 256
    patience: int = 20  # epochs without dev improvement before stopping
    dev_fraction: float = 0.1
    svf_targets: tuple[str, ...] = ("last:1",)  # empty: head only
    svf_prompts: int = 512  # training prompts whose block inputs are cached for phase B
    svf_epochs: int = 2
    svf_lr: float = 2e-3  # for the SVF offsets; the head moves at a tenth of it (it is already fitted)
    max_tokens: int = 128
    attempts: int = 3  # the escalation policy's attempts per turn (the first included)
    check_accuracy: float = 0.9  # the verifier accuracy the escalation policy assumes
    seed: int = 0
    threads: int | None = None
    cache_dir: Path | None = None


@dataclass(frozen=True)
class Part:
    """Some training rows: features, utilities at λ (NaN where unmeasured), and the measured mask."""

    x: torch.Tensor  # [N, H]
    util: np.ndarray  # [N, W]

    @property
    def mask(self) -> torch.Tensor:
        return torch.from_numpy(~np.isnan(self.util))


@dataclass
class Trained:
    """What stage 1 (and 2) produce; `svf` offsets live on `backbone.model`."""

    backbone: Backbone
    head: SelectionHead
    svf: SVFState | None
    workers: tuple[CheckpointWorker, ...]
    decision: Decision
    scales: dict[str, float]
    fit: Part  # the rows the final head was fitted on, and its early-stopping dev rows (stage 2 reuses them)
    dev: Part
    desc: torch.Tensor  # [W, D] description embeddings of `workers`
    metrics: dict[str, Any] = field(default_factory=dict)
    util: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # [N, W] utility at λ, training order
    oof: np.ndarray | None = None  # [N, W] out-of-fold τ·log q of the chosen (α, τ) (NaN: no estimate)
    escalation: EscalationPolicy | None = None


def soft_targets(util: np.ndarray, tau: float) -> np.ndarray:
    """[N, W] p_i = softmax(u_i / τ) over the measured (non-NaN) workers of each row."""
    z = np.where(np.isnan(util), -np.inf, util / tau)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def shrunk_targets(util: np.ndarray, prior: np.ndarray, alpha: float, tau: float) -> torch.Tensor:
    return torch.from_numpy(soft_targets((1.0 - alpha) * util + alpha * prior[None, :], tau)).float()


def train_stage1(
    train: RewardMatrix,
    cfg: TrainConfig,
    on_log: Log | None = None,
    executor: Executor | None = None,
    on_progress: Progress | None = None,
) -> Trained:
    """Choose α and the decision on held-out rows, fit the final head (and SVF scales), calibrate it; the
    escalation policy starts from the measured outcomes (`escalation.supervised`)."""
    log = on_log or (lambda _m: None)
    if train.texts is None:
        raise UsageError(f"{train.name} has no prompt text: a text router cannot learn from it.")
    torch.manual_seed(cfg.seed)
    backbone = load_backbone(cfg.backbone, threads=cfg.threads)
    t0 = time.perf_counter()
    feats = encode_prompts(
        backbone,
        train.texts,
        max_tokens=cfg.max_tokens,
        cache_dir=cfg.cache_dir,
        on_progress=_progress(log, on_progress),
        executor=executor,
    )
    log(f"features: {train.n} prompts in {time.perf_counter() - t0:.1f}s")
    scales = task_scales(train)
    rows = Rows(torch.from_numpy(feats), utility(train, cfg.lam, scales), train.costs())
    (chosen, tau), cal, metrics, oof = select(backbone, train, rows, cfg, log, on_progress)
    fit_idx, dev_idx = dev_indices(train.n, cfg)
    fit, dev = rows.part(fit_idx), rows.part(dev_idx)
    workers = describe_workers(train.subset(fit_idx), tasks=cfg.describe_tasks)  # fit only: no dev leak
    desc = description_embeddings(backbone, workers, cfg.max_tokens)
    head = new_head(backbone, desc.shape[0], cfg)
    targets = tuple(shrunk_targets(p.util, cal_prior(fit), chosen, tau) for p in (fit, dev))
    fit_head(head, desc, fit, dev, targets, cfg)
    svf = None
    if cfg.svf_targets:
        t2 = time.perf_counter()
        masks = (fit.mask, dev.mask)
        parts = (train.subset(fit_idx), train.subset(dev_idx))
        svf, dev_kl_svf = fit_svf(backbone, head, workers, parts, targets, masks, cfg, log, on_progress)
        metrics.update(dev_kl_svf=dev_kl_svf, svf_kept=svf is not None, svf_seconds=time.perf_counter() - t2)
        if svf is not None:  # the head reads new features now
            digest = svf_digest(svf.state_dict())
            new = encode_prompts(
                backbone,
                train.texts,
                max_tokens=cfg.max_tokens,
                cache_dir=cfg.cache_dir,
                variant=digest,
                on_progress=_progress(log, on_progress, "encoding prompts with SVF"),
            )
            rows = Rows(torch.from_numpy(new), rows.util, rows.cost)
            fit, dev = rows.part(fit_idx), rows.part(dev_idx)
            desc = description_embeddings(backbone, workers, cfg.max_tokens)
    decision = make_decision(head, desc, rows, cal, (cfg.lam, tau), mean_costs(train))
    escalation = supervised(normalised(train, scales), cfg.attempts, cfg.check_accuracy)
    metrics["stage1_seconds"] = time.perf_counter() - t0
    return Trained(
        backbone, head, svf, workers, decision, scales, fit, dev, desc, metrics, rows.util, oof, escalation
    )


@dataclass(frozen=True)
class Rows:
    """All training rows: features [N, H], utility at λ [N, W], USD cost [N, W]."""

    x: torch.Tensor
    util: np.ndarray
    cost: np.ndarray

    def part(self, idx: np.ndarray) -> Part:
        return Part(self.x[torch.from_numpy(idx)], self.util[idx])


def cal_prior(part: Part) -> np.ndarray:
    """[W] the workers' mean utility (0 where never measured): the shrinkage target of α."""
    return col_mean(part.util)


def dev_indices(n: int, cfg: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """The fit / dev split of the training rows (as `splits.dev_split`, by index)."""
    order = np.random.default_rng(cfg.seed + 7919).permutation(n)
    n_dev = max(1, round(n * cfg.dev_fraction)) if n > 1 else 0
    return np.sort(order[n_dev:]), np.sort(order[:n_dev])


def selection_folds(
    n: int, cfg: TrainConfig, repos: Sequence[str] | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(fit, held-out) row indices: k inner folds for small data, else the dev part alone. `repos` [N] names
    each row's repository ("" for a row of no repository): each repository is held out whole, in a fold of
    its own while there are at most k of them (leave one repository out), and the other rows are spread over
    the same folds, so a choice is judged on repositories it never saw, as users' repositories will be."""
    if cfg.select_folds <= 1 or n > cfg.cv_max_rows or n < 2 * cfg.select_folds:
        return [dev_indices(n, cfg)]
    rng = np.random.default_rng(cfg.seed + 104729)
    names = np.array(repos if repos is not None else [""] * n)
    distinct = sorted(set(names.tolist()) - {""})
    if len(distinct) < 2:
        folds = np.array_split(rng.permutation(n), cfg.select_folds)
    else:
        k = min(cfg.select_folds, len(distinct))
        folds = [np.zeros(0, dtype=np.int64) for _ in range(k)]
        for repo in sorted(distinct, key=lambda r: -int((names == r).sum())):  # largest first, smallest fold
            f = int(np.argmin([len(x) for x in folds]))
            folds[f] = np.concatenate([folds[f], np.flatnonzero(names == repo)])
        rest = rng.permutation(np.flatnonzero(names == ""))
        folds = [np.concatenate([f, part]) for f, part in zip(folds, np.array_split(rest, k), strict=True)]
    return [
        (np.sort(np.concatenate(folds[:f] + folds[f + 1 :])), np.sort(folds[f])) for f in range(len(folds))
    ]


def select(
    backbone: Backbone,
    train: RewardMatrix,
    rows: Rows,
    cfg: TrainConfig,
    log: Log,
    progress: Progress | None = None,
) -> tuple[tuple[float, float], Calibrated, dict[str, Any], np.ndarray]:
    """For every (α, τ): out-of-fold τ·log q of heads that never saw those rows, calibrated over the λ sweep;
    the pair with the best held-out utility wins (ties: the earlier in the grids). Also returns the winner's
    out-of-fold estimates [N, W] (NaN on rows no fold held out)."""
    t1 = time.perf_counter()
    mean_cost = mean_costs(train)
    grid = lambda_grid(mean_cost, extra=(cfg.lam,))
    prior = col_mean(rows.util)
    folds = selection_folds(train.n, cfg, repos_of(train))
    held = np.sort(np.concatenate([h for _, h in folds]))
    pairs = list(itertools.product(cfg.alphas or (0.0,), cfg.taus or (0.1,)))
    best: tuple[tuple[float, float], Calibrated, np.ndarray] | None = None
    for i, (alpha, tau) in enumerate(pairs):
        est = np.full_like(rows.util, np.nan)
        for f, (fit_idx, held_idx) in enumerate(folds):
            if progress is not None:
                progress("choosing α, τ", i * len(folds) + f, len(pairs) * len(folds))
            workers = describe_workers(train.subset(fit_idx), tasks=cfg.describe_tasks)
            desc = description_embeddings(backbone, workers, cfg.max_tokens)
            fit, out = rows.part(fit_idx), rows.part(held_idx)
            head = new_head(backbone, desc.shape[0], cfg)
            targets = tuple(shrunk_targets(p.util, cal_prior(fit), alpha, tau) for p in (fit, out))
            fit_head(head, desc, fit, out, targets, cfg)
            est[held_idx] = tau * log_probs(head, desc, out)
        cal = calibrate(
            est[held],
            rows.util[held],
            rows.cost[held],
            prior=prior,
            mean_cost=mean_cost,
            lam0=cfg.lam,
            grid=grid,
            shrinks=cfg.shrinks,
            z=cfg.confidence_z,
        )
        shrinks = " | ".join(
            ", ".join(f"{lam:.3g}: {s:g}" for lam, s in t) for t in cal.group_shrinks or (cal.shrinks,)
        )
        log(
            f"α={alpha}, τ={tau}: held-out utility {cal.score:.4f} over {len(grid)} λ ({len(folds)} folds); "
            f"shrinks {shrinks}"
        )
        if best is None or cal.score > best[1].score + 1e-12:
            best = ((alpha, tau), cal, est)
    if progress is not None:
        progress("choosing α, τ", len(pairs) * len(folds), len(pairs) * len(folds))
    assert best is not None
    (alpha, tau), cal, oof = best
    metrics: dict[str, Any] = {
        "alpha": alpha,
        "tau": tau,
        "selection_folds": len(folds),
        "selection_by": "repository" if len(set(repos_of(train)) - {""}) >= 2 else "rows",
        "held_out_utility": cal.score,
        "decision_options": cal.options,
        "raw_head": cal.raw,
        "shrinks": [list(x) for x in cal.shrinks],
        "group_shrinks": [[list(x) for x in t] for t in cal.group_shrinks],
        "selection_seconds": time.perf_counter() - t1,
    }
    return (alpha, tau), cal, metrics, oof


def repos_of(data: RewardMatrix) -> list[str]:
    """[N] each row's repository where its data set names repositories, else ""."""
    return [t if t in data.repo_tasks else "" for t in data.tasks]


def make_decision(
    head: SelectionHead,
    desc: torch.Tensor,
    rows: Rows,
    cal: Calibrated,
    lam_tau: tuple[float, float],
    mean_cost: np.ndarray,
) -> Decision:
    """The checkpoint's decision rule: the calibrated prior and shrinks around the final head's own mean."""
    lam, tau = lam_tau
    costs = tuple(float(c) for c in mean_cost)
    if cal.raw:
        return Decision(lam=lam, tau=tau, mean_cost=costs)
    est = tau * log_probs(head, desc, Part(rows.x, rows.util))
    centre = col_mean(np.where(np.isnan(rows.util), np.nan, centred(est, rows.util)))
    return Decision(
        lam,
        tau,
        cal.prior,
        tuple(float(c) for c in centre),
        cal.shrinks,
        costs,
        cal.group_shrinks,
        cal.worker_group,
    )


def new_head(backbone: Backbone, n_known: int, cfg: TrainConfig) -> SelectionHead:
    torch.manual_seed(cfg.seed)
    return SelectionHead(
        HeadConfig(backbone.hidden_size, backbone.hidden_size, rank=cfg.rank, n_known=n_known)
    )


def log_probs(head: SelectionHead, desc: torch.Tensor, part: Part) -> np.ndarray:
    """[N, W] the head's log q over the measured workers of each row (-inf elsewhere)."""
    with torch.no_grad():
        logits = head(part.x, desc).masked_fill(~part.mask, -math.inf)
        return np.asarray(torch.log_softmax(logits, dim=-1).double().numpy())


def fit_head(
    head: SelectionHead,
    desc: torch.Tensor,
    fit: Part,
    dev: Part,
    targets: tuple[torch.Tensor, ...],
    cfg: TrainConfig,
) -> tuple[float, int]:
    """Minibatch AdamW on frozen features; restores the best-dev weights. Returns (best dev KL, epochs)."""
    p_fit, p_dev = targets
    m_fit, m_dev = fit.mask, dev.mask
    opt = AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    best, best_state, stale, ran = math.inf, copy.deepcopy(head.state_dict()), 0, 0
    for epoch in range(1, cfg.epochs + 1):
        ran = epoch
        head.train()
        for idx in torch.randperm(len(fit.x), generator=gen).split(cfg.batch_size):
            loss = kl_loss(head(fit.x[idx], desc), p_fit[idx], m_fit[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.no_grad():
            dev_kl = float(kl_loss(head(dev.x, desc), p_dev, m_dev)) if len(dev.x) else float(loss)
        if dev_kl < best - 1e-5:
            best, best_state, stale = dev_kl, copy.deepcopy(head.state_dict()), 0
        else:
            stale += 1
            if stale >= cfg.patience:
                break
    head.load_state_dict(best_state)
    head.eval()
    return best, ran


def _progress(
    log: Log, progress: Progress | None, phase: str = "encoding prompts"
) -> Callable[[int, int], None]:
    """Encoding progress to `progress`, else a log line every ten seconds."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(phase, done, total)
        elif time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"{phase} {done}/{total}")

    return report
