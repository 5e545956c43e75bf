"""Router training stage 1: soft-label KL targets, then only the head and SVF scales are fitted.

Phase A fits the head on cached prompt features (seconds); phase B fine-tunes head + SVF scales of the
last backbone block(s) from cached block inputs, kept only if it lowers dev KL. Stage 2 (sep-CMA-ES, `es.py`)
starts from the result; `trainer.py` runs the stages for `fugu router train`. Imports torch: import lazily.
Never prints: progress goes to `on_log`.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fugu_cli.errors import UsageError
from fugu_cli.router.backbone import Backbone, load_backbone
from fugu_cli.router.checkpoint import CheckpointWorker
from fugu_cli.router.data import RewardMatrix, dev_split
from fugu_cli.router.embed_cache import (
    BlockBatch,
    block_features,
    blocks_needed,
    capture_block_inputs,
    encode_prompts,
)
from fugu_cli.router.features import describe, description_text
from fugu_cli.router.head import HeadConfig, SelectionHead
from fugu_cli.router.svf import SVFState, apply_svf

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainConfig:
    backbone: str = "minilm"
    tau: float = 0.1  # softmax temperature of the targets, in units of (reward / reward scale)
    # One outcome per (prompt, worker) is a noisy sample: targets use (1-α)·r + α·(the worker's mean reward),
    # with α picked from this grid by dev reward (the first α wins ties).
    shrink: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
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


@dataclass
class Trained:
    """What stage 1 (and 2) produce; `svf` offsets live on `backbone.model`."""

    backbone: Backbone
    head: SelectionHead
    svf: SVFState | None
    workers: tuple[CheckpointWorker, ...]
    scale: float  # reward scale the targets were divided by
    metrics: dict[str, Any] = field(default_factory=dict)


def reward_scale(reward: np.ndarray) -> float:
    return max(1.0, float(np.nanmax(np.abs(reward)))) if reward.size else 1.0


def soft_targets(reward: np.ndarray, tau: float, scale: float = 1.0) -> np.ndarray:
    """[N, W] p_i = softmax(r_i / (scale·τ))."""
    z = reward / (scale * tau)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return np.asarray(e / e.sum(axis=1, keepdims=True))


def task_scales(data: RewardMatrix) -> dict[str, float]:
    """Reward scale per task: benchmarks on a 1-10 judge scale must not flatten the 0/1 ones beside them."""
    tasks = np.array(data.tasks)
    return {t: reward_scale(data.reward[tasks == t]) for t in set(data.tasks)}


def _scaled(part: RewardMatrix, scales: dict[str, float], default: float) -> np.ndarray:
    rows = np.array([scales.get(t, default) for t in part.tasks])
    return np.asarray(part.reward / rows[:, None]) if part.n else part.reward


def _targets(
    part: RewardMatrix,
    *,
    prior: np.ndarray,
    alpha: float,
    tau: float,
    scales: dict[str, float],
    default: float,
) -> torch.Tensor:
    shrunk = (1.0 - alpha) * _scaled(part, scales, default) + alpha * prior[None, :]
    return torch.from_numpy(soft_targets(shrunk, tau)).float()


def kl_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over rows of KL(target ‖ softmax(logits))."""
    return F.kl_div(F.log_softmax(logits, dim=-1), target, reduction="batchmean")


def describe_workers(
    data: RewardMatrix, models: dict[str, str] | None = None, top_tasks: int = 3
) -> tuple[CheckpointWorker, ...]:
    """Descriptions built from the data: display name, organisation, and the tasks the worker does best."""
    out = []
    tasks = np.array(data.tasks)
    names = sorted(set(data.tasks) - {""})
    for j, w in enumerate(data.workers):
        info = data.worker_info.get(w, {})
        display = info.get("name") or w.split("/")[-1]
        org = next((p[5:] for p in info.get("tags", "").split("|") if p.startswith("Org: ")), "")
        rel = [(data.reward[tasks == t, j].mean() - data.reward[tasks == t].mean(), t) for t in names]
        strong = [t for gain, t in sorted(rel, reverse=True)[:top_tasks] if gain > 0]
        text = display + (f" by {org}" if org else "") + f"; mean reward {np.mean(data.reward[:, j]):.2f}"
        if strong:
            text += "; relatively strong on " + ", ".join(strong)
        out.append(CheckpointWorker(w, text, (models or {}).get(w)))
    return tuple(out)


def description_embeddings(
    backbone: Backbone, workers: Sequence[CheckpointWorker], max_tokens: int
) -> torch.Tensor:
    """[W, D] exactly as LearnedRouter computes them for known workers."""
    return describe(
        backbone, [description_text(w.name, w.description, w.model) for w in workers], max_tokens=max_tokens
    )


def train_stage1(train: RewardMatrix, cfg: TrainConfig, on_log: Log | None = None) -> Trained:
    """Fit head (and SVF scales) to softmax(r/τ) targets with AdamW and dev early stopping."""
    log = on_log or (lambda _m: None)
    if train.texts is None:
        raise UsageError(f"{train.name} has no prompt text: a text router cannot learn from it.")
    torch.manual_seed(cfg.seed)
    backbone = load_backbone(cfg.backbone, threads=cfg.threads)
    fit, dev = dev_split(train, cfg.dev_fraction, cfg.seed)
    t0 = time.perf_counter()
    feats = encode_prompts(
        backbone, train.texts, max_tokens=cfg.max_tokens, cache_dir=cfg.cache_dir, on_progress=_progress(log)
    )
    log(f"features: {train.n} prompts in {time.perf_counter() - t0:.1f}s")
    pos = {p: i for i, p in enumerate(train.prompt_ids)}
    x_fit = torch.from_numpy(feats[[pos[p] for p in fit.prompt_ids]])
    x_dev = torch.from_numpy(feats[[pos[p] for p in dev.prompt_ids]])
    scale = reward_scale(train.reward)
    scales = task_scales(train)
    prior = _scaled(fit, scales, scale).mean(0)
    workers = describe_workers(train)
    desc = description_embeddings(backbone, workers, cfg.max_tokens)
    t1 = time.perf_counter()
    best: tuple[float, float, SelectionHead, float, int] | None = None
    for alpha in cfg.shrink or (0.0,):
        torch.manual_seed(cfg.seed)
        head = SelectionHead(
            HeadConfig(backbone.hidden_size, backbone.hidden_size, rank=cfg.rank, n_known=len(workers))
        )
        targets = partial(_targets, prior=prior, alpha=alpha, tau=cfg.tau, scales=scales, default=scale)
        dev_kl, epochs = fit_head(head, desc, x_fit, targets(fit), x_dev, targets(dev), cfg)
        with torch.no_grad():
            picks = head(x_dev, desc).argmax(1).numpy()
        dev_reward = float(dev.reward[np.arange(dev.n), picks].mean()) if dev.n else 0.0
        log(f"phase A (head), α={alpha}: dev KL {dev_kl:.4f}, dev reward {dev_reward:.4f}, {epochs} epochs")
        if best is None or dev_reward > best[0] + 1e-12:
            best = (dev_reward, alpha, head, dev_kl, epochs)
    assert best is not None
    dev_reward, alpha, head, dev_kl, epochs = best
    targets = partial(_targets, prior=prior, alpha=alpha, tau=cfg.tau, scales=scales, default=scale)
    metrics: dict[str, Any] = {
        "shrink": alpha,
        "dev_reward_head": dev_reward,
        "dev_kl_head": dev_kl,
        "head_epochs": epochs,
        "head_seconds": time.perf_counter() - t1,
    }
    svf = None
    if cfg.svf_targets:
        svf = apply_svf(backbone.model, list(cfg.svf_targets))
        t2 = time.perf_counter()
        kept, dev_kl_svf = fit_svf(backbone, svf, head, workers, fit, dev, targets, cfg, log)
        metrics.update(dev_kl_svf=dev_kl_svf, svf_kept=kept, svf_seconds=time.perf_counter() - t2)
        if not kept:
            svf = None
    metrics["stage1_seconds"] = time.perf_counter() - t0
    return Trained(backbone, head, svf, workers, scale, metrics)


def fit_head(
    head: SelectionHead,
    desc: torch.Tensor,
    x_fit: torch.Tensor,
    p_fit: torch.Tensor,
    x_dev: torch.Tensor,
    p_dev: torch.Tensor,
    cfg: TrainConfig,
) -> tuple[float, int]:
    """Minibatch AdamW on frozen features; restores the best-dev weights. Returns (best dev KL, epochs)."""
    opt = torch.optim.AdamW(head.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    best, best_state, stale, ran = math.inf, copy.deepcopy(head.state_dict()), 0, 0
    for epoch in range(1, cfg.epochs + 1):
        ran = epoch
        head.train()
        for idx in torch.randperm(len(x_fit), generator=gen).split(cfg.batch_size):
            loss = kl_loss(head(x_fit[idx], desc), p_fit[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        head.eval()
        with torch.no_grad():
            dev_kl = float(kl_loss(head(x_dev, desc), p_dev)) if len(x_dev) else float(loss)
        if dev_kl < best - 1e-5:
            best, best_state, stale = dev_kl, copy.deepcopy(head.state_dict()), 0
        else:
            stale += 1
            if stale >= cfg.patience:
                break
    head.load_state_dict(best_state)
    return best, ran


def fit_svf(
    backbone: Backbone,
    svf: SVFState,
    head: SelectionHead,
    workers: Sequence[CheckpointWorker],
    fit: RewardMatrix,
    dev: RewardMatrix,
    targets: Callable[[RewardMatrix], torch.Tensor],
    cfg: TrainConfig,
    log: Log,
) -> tuple[bool, float]:
    """Phase B: head + SVF scales on cached inputs of the last block(s). Kept only if dev KL improves."""
    assert fit.texts is not None and dev.texts is not None
    rng = np.random.default_rng(cfg.seed)
    n_blocks = blocks_needed(backbone.model, svf.targets)
    fit_rows = np.sort(rng.permutation(fit.n)[: cfg.svf_prompts])
    dev_rows = np.sort(rng.permutation(dev.n)[: max(1, cfg.svf_prompts // 4)])
    fit_b = capture_block_inputs(
        backbone, [fit.texts[i] for i in fit_rows], fit_rows, n_blocks, max_tokens=cfg.max_tokens
    )
    dev_b = capture_block_inputs(
        backbone, [dev.texts[i] for i in dev_rows], dev_rows, n_blocks, max_tokens=cfg.max_tokens
    )
    p_fit, p_dev = targets(fit), targets(dev)
    desc_texts = [description_text(w.name, w.description, w.model) for w in workers]

    def dev_loss() -> float:
        with torch.no_grad():
            desc = backbone.encode(desc_texts, max_length=cfg.max_tokens)
            tot = sum(
                float(kl_loss(head(_feats(backbone, b, n_blocks), desc), p_dev[b.rows])) * len(b.rows)
                for b in dev_b
            )
        return tot / sum(len(b.rows) for b in dev_b)

    start = best = dev_loss()
    head_state, svf_state = copy.deepcopy(head.state_dict()), svf.state_dict()
    groups = [
        {"params": list(head.parameters()), "lr": cfg.svf_lr / 10},
        {"params": list(svf.parameters()), "lr": cfg.svf_lr},
    ]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    for epoch in range(1, cfg.svf_epochs + 1):
        for bi in rng.permutation(len(fit_b)):
            b = fit_b[bi]
            desc = backbone.encode(desc_texts, max_length=cfg.max_tokens, grad=True)
            loss = kl_loss(head(_feats(backbone, b, n_blocks, grad=True), desc), p_fit[b.rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
        now = dev_loss()
        log(f"phase B (SVF) epoch {epoch}: dev KL {now:.4f} (start {start:.4f})")
        if now < best - 1e-5:
            best, head_state, svf_state = now, copy.deepcopy(head.state_dict()), svf.state_dict()
    head.load_state_dict(head_state)
    svf.load_state_dict(svf_state)
    kept = best < start - 1e-5
    if not kept:
        svf.load_state_dict({k: torch.zeros_like(v) for k, v in svf_state.items()})
    return kept, best


def _feats(backbone: Backbone, batch: BlockBatch, n_blocks: int, grad: bool = False) -> torch.Tensor:
    if grad:
        out: torch.Tensor = block_features(backbone, batch, n_blocks)
        return out
    with torch.no_grad():
        out = block_features(backbone, batch, n_blocks)
    return out


def _progress(log: Log) -> Callable[[int, int], None]:
    last = [0.0]

    def report(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 10 or done == total:
            last[0] = time.perf_counter()
            log(f"encoding prompts {done}/{total}")

    return report
