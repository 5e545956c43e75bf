"""Router training stage 1: soft labels from the one objective, then only the head (and SVF scales) fitted.

Targets are p_i = softmax(ũ_i / τ) over the workers measured on prompt i, with ũ = (1 − α)·u + α·(the
worker's mean u) and u = normalised reward − λ·USD (`objective.py`). Phase A fits the head on cached prompt
features for every α of a grid; the α whose calibrated decisions (`calibrate.py`) give the best dev utility
wins. Phase B fine-tunes head + SVF scales of the last backbone block(s), kept only if it lowers dev KL.
Stage 2 (`trainer.py`) starts from the result. Imports torch: import lazily. Never prints (`on_log`).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fugu_cli.errors import UsageError
from fugu_cli.router.backbone import Backbone, load_backbone
from fugu_cli.router.calibrate import DEFAULT_SHRINKS, calibrate
from fugu_cli.router.checkpoint import CheckpointWorker, Decision
from fugu_cli.router.data import RewardMatrix, mean_costs
from fugu_cli.router.describe import describe_workers
from fugu_cli.router.embed_cache import encode_prompts
from fugu_cli.router.executor import Executor
from fugu_cli.router.features import description_embeddings
from fugu_cli.router.head import HeadConfig, SelectionHead
from fugu_cli.router.objective import task_scales, utility
from fugu_cli.router.splits import dev_split
from fugu_cli.router.svf import SVFState
from fugu_cli.router.svf_train import fit_svf, kl_loss, svf_digest

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainConfig:
    backbone: str = "minilm"
    lam: float = 0.0  # λ, reward per USD: the objective the targets, selection and stage 2 use
    tau: float = 0.1  # softmax temperature of the targets, in normalised-utility units
    # One outcome per (prompt, worker) is a noisy sample: targets use (1-α)·u + α·(the worker's mean u), with
    # α picked from this grid by dev utility (the first α wins ties).
    alphas: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    shrinks: tuple[float, ...] = DEFAULT_SHRINKS  # decision shrink toward the best single (calibrate.py)
    describe_tasks: bool = True  # worker descriptions name the tasks a worker is strong on (not repositories)
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
    seed: int = 0
    threads: int | None = None
    cache_dir: Path | None = None


@dataclass(frozen=True)
class Part:
    """One side of the fit/dev split: features, utilities at λ, and the measured mask."""

    x: torch.Tensor  # [N, H]
    util: np.ndarray  # [N, W] (NaN where unmeasured)

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
    fit: Part  # the fit / dev parts the head was fitted and calibrated on (stage 2 reuses them)
    dev: Part
    desc: torch.Tensor  # [W, D] description embeddings of `workers`
    mean_cost: np.ndarray  # [W] mean USD per prompt on the training part
    metrics: dict[str, Any] = field(default_factory=dict)


def soft_targets(util: np.ndarray, tau: float) -> np.ndarray:
    """[N, W] p_i = softmax(u_i / τ) over the measured (non-NaN) workers of each row."""
    z = np.where(np.isnan(util), -np.inf, util / tau)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def shrunk_targets(util: np.ndarray, prior: np.ndarray, alpha: float, tau: float) -> torch.Tensor:
    return torch.from_numpy(soft_targets((1.0 - alpha) * util + alpha * prior[None, :], tau)).float()


def train_stage1(
    train: RewardMatrix, cfg: TrainConfig, on_log: Log | None = None, executor: Executor | None = None
) -> Trained:
    """Fit the head (and SVF scales) to the soft targets with AdamW and dev early stopping, then calibrate."""
    log = on_log or (lambda _m: None)
    if train.texts is None:
        raise UsageError(f"{train.name} has no prompt text: a text router cannot learn from it.")
    torch.manual_seed(cfg.seed)
    backbone = load_backbone(cfg.backbone, threads=cfg.threads)
    fit, dev = dev_split(train, cfg.dev_fraction, cfg.seed)
    t0 = time.perf_counter()
    feats = encode_prompts(
        backbone,
        train.texts,
        max_tokens=cfg.max_tokens,
        cache_dir=cfg.cache_dir,
        on_progress=_progress(log),
        executor=executor,
    )
    log(f"features: {train.n} prompts in {time.perf_counter() - t0:.1f}s")
    scales = task_scales(train)
    pos = {p: i for i, p in enumerate(train.prompt_ids)}

    def part(m: RewardMatrix) -> Part:
        return Part(torch.from_numpy(feats[[pos[p] for p in m.prompt_ids]]), utility(m, cfg.lam, scales))

    p_fit, p_dev = part(fit), part(dev)
    workers = describe_workers(fit, tasks=cfg.describe_tasks)  # fit only: dev must not leak into features
    desc = description_embeddings(backbone, workers, cfg.max_tokens)
    head, metrics, prior = select_head(backbone, desc, p_fit, p_dev, cfg, log)
    svf = None
    if cfg.svf_targets:
        t2 = time.perf_counter()
        alpha = float(metrics["alpha"])
        targets = tuple(shrunk_targets(p.util, prior, alpha, cfg.tau) for p in (p_fit, p_dev))
        masks = (p_fit.mask, p_dev.mask)
        svf, dev_kl_svf = fit_svf(backbone, head, workers, (fit, dev), targets, masks, cfg, log)
        metrics.update(dev_kl_svf=dev_kl_svf, svf_kept=svf is not None, svf_seconds=time.perf_counter() - t2)
        if svf is not None:  # the head saw new features: recalibrate on them
            assert train.texts is not None
            digest = svf_digest(svf.state_dict())
            new = encode_prompts(
                backbone, train.texts, max_tokens=cfg.max_tokens, cache_dir=cfg.cache_dir, variant=digest
            )
            desc = description_embeddings(backbone, workers, cfg.max_tokens)
            p_fit = Part(torch.from_numpy(new[[pos[p] for p in fit.prompt_ids]]), p_fit.util)
            p_dev = Part(torch.from_numpy(new[[pos[p] for p in dev.prompt_ids]]), p_dev.util)
    costs = mean_costs(train)
    decision, options = decide(head, desc, p_fit, p_dev, cfg, costs)
    metrics.update(decision_options=options, shrink=decision.shrink, stage1_seconds=time.perf_counter() - t0)
    log(f"decision: shrink {decision.shrink:g}, dev utility by option {_fmt(options)}")
    return Trained(backbone, head, svf, workers, decision, scales, p_fit, p_dev, desc, costs, metrics)


def select_head(
    backbone: Backbone, desc: torch.Tensor, fit: Part, dev: Part, cfg: TrainConfig, log: Log
) -> tuple[SelectionHead, dict[str, Any], np.ndarray]:
    """Phase A for every α; the head whose calibrated decisions score best on dev wins (ties: smaller α)."""
    prior = np.nanmean(fit.util, axis=0)
    prior = np.where(np.isnan(prior), 0.0, prior)
    t1 = time.perf_counter()
    best: tuple[float, float, SelectionHead, float, int] | None = None
    for alpha in cfg.alphas or (0.0,):
        torch.manual_seed(cfg.seed)
        head = SelectionHead(
            HeadConfig(backbone.hidden_size, backbone.hidden_size, rank=cfg.rank, n_known=desc.shape[0])
        )
        targets = tuple(shrunk_targets(p.util, prior, alpha, cfg.tau) for p in (fit, dev))
        dev_kl, epochs = fit_head(head, desc, fit, dev, targets, cfg)
        decision, _ = decide(head, desc, fit, dev, cfg, np.zeros(desc.shape[0]))
        dev_u = _dev_utility(head, desc, dev, decision)
        log(f"phase A (head), α={alpha}: dev KL {dev_kl:.4f}, dev utility {dev_u:.4f}, {epochs} epochs")
        if best is None or dev_u > best[0] + 1e-12:
            best = (dev_u, alpha, head, dev_kl, epochs)
    assert best is not None
    dev_u, alpha, head, dev_kl, epochs = best
    metrics: dict[str, Any] = {
        "alpha": alpha,
        "dev_utility_head": dev_u,
        "dev_kl_head": dev_kl,
        "head_epochs": epochs,
        "head_seconds": time.perf_counter() - t1,
    }
    return head, metrics, prior


def log_probs(head: SelectionHead, desc: torch.Tensor, part: Part) -> np.ndarray:
    """[N, W] the head's log q over the measured workers of each row."""
    with torch.no_grad():
        logits = head(part.x, desc).masked_fill(~part.mask, -math.inf)
        return np.asarray(torch.log_softmax(logits, dim=-1).double().numpy())


def decide(
    head: SelectionHead, desc: torch.Tensor, fit: Part, dev: Part, cfg: TrainConfig, mean_cost: np.ndarray
) -> tuple[Decision, dict[str, float]]:
    """Calibrate the decision (bias and shrink) of a fitted head on fit, choosing by dev utility."""
    est_fit = cfg.tau * log_probs(head, desc, fit)
    est_dev = cfg.tau * log_probs(head, desc, dev)
    cal = calibrate(est_fit, fit.util, est_dev, dev.util, cfg.shrinks)
    decision = Decision(cfg.lam, cfg.tau, cal.shrink, cal.bias, tuple(float(c) for c in mean_cost))
    return decision, cal.options


def _dev_utility(head: SelectionHead, desc: torch.Tensor, dev: Part, decision: Decision) -> float:
    from fugu_cli.router.calibrate import mean_utility

    known = np.arange(desc.shape[0])
    return mean_utility(dev.util, decision.base(log_probs(head, desc, dev), known))


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
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
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
    return best, ran


def _fmt(options: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in options.items())


def _progress(log: Log) -> Callable[[int, int], None]:
    last = [0.0]

    def report(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"encoding prompts {done}/{total}")

    return report
