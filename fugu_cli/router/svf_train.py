"""Stage 1, phase B: head + SVF scales of the last backbone block(s), trained on cached inputs of those blocks
so each step re-runs only them; kept only if it lowers dev KL. Also the masked KL loss both phases minimise,
and the digest that names an SVF-changed backbone in the feature cache.

Imports torch: import lazily. Never prints: progress goes to `log`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

from fugu_cli.router.adamw import AdamW
from fugu_cli.router.backbone import Backbone
from fugu_cli.router.checkpoint import CheckpointWorker
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.embed_cache import BlockBatch, block_features, blocks_needed, capture_block_inputs
from fugu_cli.router.features import description_text
from fugu_cli.router.head import SelectionHead
from fugu_cli.router.svf import SVFState, apply_svf


class SVFSettings(Protocol):
    """The part of `train.TrainConfig` phase B reads."""

    @property
    def svf_targets(self) -> tuple[str, ...]: ...
    @property
    def svf_prompts(self) -> int: ...
    @property
    def svf_epochs(self) -> int: ...
    @property
    def svf_lr(self) -> float: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def seed(self) -> int: ...


def kl_loss(logits: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows of KL(target ‖ softmax(logits)) over the measured (`mask`) workers of each row."""
    if mask is not None:
        logits = logits.masked_fill(~mask, -1e9)  # finite: 0 · (-1e9) is 0, 0 · -inf would be NaN
    return F.kl_div(F.log_softmax(logits, dim=-1), target, reduction="batchmean")


def svf_digest(state: Mapping[str, torch.Tensor]) -> str:
    """Names a backbone changed by these SVF offsets, so its prompt vectors are cached apart."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode() + state[name].numpy().tobytes())
    return "svf-" + digest.hexdigest()[:16]


def fit_svf(
    backbone: Backbone,
    head: SelectionHead,
    workers: Sequence[CheckpointWorker],
    parts: tuple[RewardMatrix, RewardMatrix],
    targets: tuple[torch.Tensor, ...],
    masks: tuple[torch.Tensor, torch.Tensor],
    cfg: SVFSettings,
    log: Callable[[str], None],
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[SVFState | None, float]:
    """Attach SVF to `cfg.svf_targets`, train it with the head; returns (the SVF state, or None with the
    offsets removed when dev KL did not improve; the best dev KL)."""
    fit, dev = parts
    assert fit.texts is not None and dev.texts is not None
    svf = apply_svf(backbone.model, list(cfg.svf_targets))
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
    p_fit, p_dev = targets
    m_fit, m_dev = masks
    desc_texts = [description_text(w.name, w.description, w.model) for w in workers]

    def dev_loss() -> float:
        with torch.no_grad():
            desc = backbone.encode(desc_texts, max_length=cfg.max_tokens)
            tot = sum(
                float(kl_loss(head(_feats(backbone, b, n_blocks), desc), p_dev[b.rows], m_dev[b.rows]))
                * len(b.rows)
                for b in dev_b
            )
        return tot / sum(len(b.rows) for b in dev_b)

    start = best = dev_loss()
    head_state, svf_state = copy.deepcopy(head.state_dict()), svf.state_dict()
    groups = [
        {"params": list(head.parameters()), "lr": cfg.svf_lr / 10},
        {"params": list(svf.parameters()), "lr": cfg.svf_lr},
    ]
    opt = AdamW(groups, weight_decay=0.0)
    total = cfg.svf_epochs * len(fit_b)
    for epoch in range(1, cfg.svf_epochs + 1):
        for i, bi in enumerate(rng.permutation(len(fit_b))):
            if progress is not None:
                progress("fitting SVF scales", (epoch - 1) * len(fit_b) + i, total)
            b = fit_b[bi]
            desc = backbone.encode(desc_texts, max_length=cfg.max_tokens, grad=True)
            logits = head(_feats(backbone, b, n_blocks, grad=True), desc)
            loss = kl_loss(logits, p_fit[b.rows], m_fit[b.rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
        now = dev_loss()
        if progress is not None:
            progress("fitting SVF scales", epoch * len(fit_b), total)
        log(f"phase B (SVF) epoch {epoch}: dev KL {now:.4f} (start {start:.4f})")
        if now < best - 1e-5:
            best, head_state, svf_state = now, copy.deepcopy(head.state_dict()), svf.state_dict()
    head.load_state_dict(head_state)
    svf.load_state_dict(svf_state)
    if best < start - 1e-5:
        return svf, best
    svf.remove()
    return None, best


def _feats(backbone: Backbone, batch: BlockBatch, n_blocks: int, grad: bool = False) -> torch.Tensor:
    if grad:
        out: torch.Tensor = block_features(backbone, batch, n_blocks)
        return out
    with torch.no_grad():
        out = block_features(backbone, batch, n_blocks)
    return out
