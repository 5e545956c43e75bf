"""Router training stage 2: sep-CMA-ES (`es.py`) from the stage-1 solution, maximising the one objective of
the checkpoint's own decisions on recorded outcomes; kept only if it strictly improves dev utility, and then
recalibrated. Candidates are scored through an `Executor`.

Imports torch: import lazily. Never prints: progress goes to `log` and `on_generation`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from fugu_cli.router.calibrate import centred, col_mean
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.embed_cache import blocks_needed, capture_block_inputs, encode_prompts
from fugu_cli.router.es import (
    ESConfig,
    GenerationStats,
    OfflineFitness,
    param_vector,
    popsize_for,
    run_sep_cma,
)
from fugu_cli.router.executor import Executor
from fugu_cli.router.features import description_embeddings, description_text
from fugu_cli.router.splits import dev_split
from fugu_cli.router.svf_train import svf_digest
from fugu_cli.router.train import Log, Part, TrainConfig, Trained, log_probs


@dataclass(frozen=True)
class Stage2:
    es: ESConfig = field(default_factory=lambda: ESConfig(generations=30))
    batch: int = 256  # prompts per fitness call (0: all, deterministic)
    prompts: int = 512  # training prompts whose block inputs ES may sample (SVF case)


def run_stage2(
    trained: Trained,
    train: RewardMatrix,
    cfg: TrainConfig,
    stage: Stage2,
    log: Log,
    on_generation: Callable[[GenerationStats], None] | None = None,
    executor: Executor | None = None,
) -> tuple[Trained, list[GenerationStats]]:
    """sep-CMA-ES over head (+ SVF) parameters; the result is kept only if its dev utility beats stage 1's."""
    fit, dev = dev_split(train, cfg.dev_fraction, cfg.seed)
    fitness = _fitness(trained, cfg, fit, trained.fit, stage.batch, stage.prompts)
    dev_fitness = _fitness(trained, cfg, dev, trained.dev, 0, stage.prompts)
    params = [*trained.head.parameters(), *(trained.svf.parameters() if trained.svf else [])]
    x0 = param_vector(params)
    size = stage.es.popsize or popsize_for(x0.size)
    log(f"stage 2: sep-CMA-ES over {x0.size} parameters, population {size}")
    result = run_sep_cma(fitness, x0, stage.es, on_generation, executor)
    before, after = dev_fitness(x0, 0), dev_fitness(result.x, 0)
    keep = after > before + 1e-12  # a tie on a small dev part is no evidence: keep stage 1
    log(f"stage 2: dev utility {before:.4f} -> {after:.4f} ({'kept' if keep else 'discarded'})")
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(
            torch.as_tensor(result.x if keep else x0, dtype=torch.float32), params
        )
    trained.metrics.update(
        es_dev_before=before, es_dev_after=after, es_kept=keep, es_generations=len(result.history)
    )
    if keep:
        trained = _recalibrated(trained, train, cfg, fit, dev)
    return trained, result.history


def _recalibrated(
    trained: Trained, train: RewardMatrix, cfg: TrainConfig, fit: RewardMatrix, dev: RewardMatrix
) -> Trained:
    """The head moved: re-centre the decision on its new mean (and, with SVF, on the features it reads)."""
    desc, p_fit, p_dev = trained.desc, trained.fit, trained.dev
    if trained.svf is not None:
        assert train.texts is not None
        feats = encode_prompts(
            trained.backbone,
            train.texts,
            max_tokens=cfg.max_tokens,
            cache_dir=cfg.cache_dir,
            variant=svf_digest(trained.svf.state_dict()),
        )
        pos = {p: i for i, p in enumerate(train.prompt_ids)}
        p_fit = Part(torch.from_numpy(feats[[pos[p] for p in fit.prompt_ids]]), p_fit.util)
        p_dev = Part(torch.from_numpy(feats[[pos[p] for p in dev.prompt_ids]]), p_dev.util)
        desc = description_embeddings(trained.backbone, trained.workers, cfg.max_tokens)
    d = trained.decision
    if d.prior:
        both = Part(torch.cat([p_fit.x, p_dev.x]), np.vstack([p_fit.util, p_dev.util]))
        est = d.tau * log_probs(trained.head, desc, both)
        centre = col_mean(np.where(np.isnan(both.util), np.nan, centred(est, both.util)))
        d = replace(d, centre=tuple(float(c) for c in centre))
    return replace(trained, decision=d, fit=p_fit, dev=p_dev, desc=desc)


def _fitness(
    trained: Trained, cfg: TrainConfig, part: RewardMatrix, data: Part, per_gen: int, max_prompts: int
) -> OfflineFitness:
    d = trained.decision
    common: dict[str, Any] = {
        "head_config": trained.head.config.to_json(),
        "util": data.util,
        "tau": d.tau,
        "shrink": d.shrink(np.arange(len(trained.workers))),
        "prior": np.asarray(d.prior) if d.prior else None,
        "centre": np.asarray(d.centre) if d.centre else None,
        "per_generation": per_gen,
        "seed": cfg.seed,
    }
    if trained.svf is None:
        return OfflineFitness(**common, features=data.x.numpy(), desc=trained.desc.numpy())
    assert part.texts is not None
    backbone = trained.backbone
    rows = np.sort(np.random.default_rng(cfg.seed + 1).permutation(part.n)[:max_prompts])
    n_blocks = blocks_needed(backbone.model, trained.svf.targets)
    batches = capture_block_inputs(
        backbone, [part.texts[i] for i in rows], rows, n_blocks, max_tokens=cfg.max_tokens
    )
    return OfflineFitness(
        **common,
        backbone_spec=cfg.backbone,
        svf_targets=tuple(trained.svf.targets),
        desc_texts=tuple(description_text(w.name, w.description, w.model) for w in trained.workers),
        max_tokens=cfg.max_tokens,
        batches=batches,
        n_blocks=n_blocks,
    )
