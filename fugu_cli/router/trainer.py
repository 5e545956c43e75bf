"""`fugu router train`: load and split the data, run stage 1 (`train.py`) and stage 2 (sep-CMA-ES, `es.py`),
save the checkpoint; plus `router_utilities`, a checkpoint's reward estimates for evaluation.

Imports torch: import lazily. Never prints: progress goes to `on_log`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from fugu_cli.errors import UsageError
from fugu_cli.router.backbone import load_backbone
from fugu_cli.router.checkpoint import CheckpointWorker, RouterCheckpoint, save_checkpoint
from fugu_cli.router.data import (
    RewardMatrix,
    SplitSpec,
    dev_split,
    load_dataset,
    load_store_outcomes,
    split_matrix,
)
from fugu_cli.router.embed_cache import blocks_needed, capture_block_inputs, encode_prompts
from fugu_cli.router.es import (
    ESConfig,
    GenerationStats,
    OfflineFitness,
    param_vector,
    popsize_for,
    run_sep_cma,
)
from fugu_cli.router.evaluate import mean_costs
from fugu_cli.router.features import description_text
from fugu_cli.router.svf import apply_svf
from fugu_cli.router.train import Log, TrainConfig, Trained, description_embeddings, train_stage1

Stage = Literal["sft", "es", "both"]


@dataclass(frozen=True)
class TrainOptions:
    """What `fugu router train` passes in."""

    data: Path
    out: Path
    stage: Stage = "both"
    split: str | None = None  # None: the data set's own test split if it has one, else kfold:5:0:0
    config: TrainConfig = field(default_factory=TrainConfig)
    es: ESConfig = field(default_factory=lambda: ESConfig(generations=30))
    es_batch: int = 256  # tasks per fitness call
    es_prompts: int = 512  # training prompts whose block inputs ES may sample (SVF case)
    lam: float = 0.0  # fitness = reward − λ × cost
    names: dict[str, str] | None = None  # data-set worker -> worker name in the checkpoint (pool names)
    models: dict[str, str] | None = None  # worker name (after `names`) -> litellm model id
    store: bool = False  # `data` is a fugu store (SQLite) rather than a dataset.toml folder


@dataclass(frozen=True)
class TrainResult:
    checkpoint: Path
    meta: RouterCheckpoint
    history: list[GenerationStats]


def default_split(data: RewardMatrix) -> str:
    return "given:test" if "test" in set(data.splits) and "train" in set(data.splits) else "kfold:5:0:0"


def train_command(
    opts: TrainOptions,
    on_log: Log | None = None,
    on_generation: Callable[[GenerationStats], None] | None = None,
) -> TrainResult:
    """Load data, split, run the asked stages, save the checkpoint."""
    log = on_log or (lambda _m: None)
    full = (load_store_outcomes(opts.data) if opts.store else load_dataset(opts.data)).complete()
    full = full.renamed(opts.names or {})
    spec = SplitSpec.parse(opts.split or default_split(full))
    parts = split_matrix(full, spec)
    train = parts.train
    if train.n < 2 or len(train.workers) < 2:
        raise UsageError(
            f"{full.name}: need at least 2 prompts and 2 workers to train "
            f"(have {train.n} × {len(train.workers)})."
        )
    log(
        f"{full.name}: {train.n} training prompts × {len(train.workers)} workers (split {spec}, "
        f"{parts.dropped_duplicates} duplicates of held-out prompts dropped)"
    )
    cfg = opts.config if opts.stage != "es" else replace(opts.config, epochs=0, svf_targets=())
    trained = train_stage1(train, cfg, log)
    trained = replace(
        trained, workers=tuple(replace(w, model=(opts.models or {}).get(w.name)) for w in trained.workers)
    )
    history: list[GenerationStats] = []
    if opts.stage in ("es", "both"):
        history = run_stage2(trained, train, opts, log, on_generation)
    training = {
        "data": full.name,
        "path": str(opts.data),
        "split": str(spec),
        "stage": opts.stage,
        "n_train": train.n,
        "dropped_duplicates": parts.dropped_duplicates,
        "reward_scale": trained.scale,
        "lambda": opts.lam,
        "mean_cost": mean_costs(train).tolist(),
        "seed": cfg.seed,
        "names": dict(opts.names or {}),
    }
    meta = RouterCheckpoint(
        backbone=cfg.backbone,
        workers=trained.workers,
        head={},
        tau=cfg.tau,
        max_tokens=cfg.max_tokens,
        training=training,
        metrics=trained.metrics,
    )
    meta = save_checkpoint(opts.out, trained.head, trained.svf, meta)
    log(f"saved {opts.out}")
    return TrainResult(opts.out, meta, history)


def run_stage2(
    trained: Trained,
    train: RewardMatrix,
    opts: TrainOptions,
    log: Log,
    on_generation: Callable[[GenerationStats], None] | None,
) -> list[GenerationStats]:
    """sep-CMA-ES from the stage-1 solution; the result is kept only if it does at least as well on dev."""
    fit, dev = dev_split(train, opts.config.dev_fraction, opts.config.seed)
    make = partial(_fitness, trained, opts)
    fitness, dev_fitness = make(fit, opts.es_batch, opts.es_prompts), make(dev, 0, opts.es_prompts)
    params = [*trained.head.parameters(), *(trained.svf.parameters() if trained.svf else [])]
    x0 = param_vector(params)
    log(
        f"stage 2: sep-CMA-ES over {x0.size} parameters, population {opts.es.popsize or popsize_for(x0.size)}"
    )
    result = run_sep_cma(fitness, x0, opts.es, on_generation)
    before, after = dev_fitness(x0, 0), dev_fitness(result.x, 0)
    keep = after >= before
    log(f"stage 2: dev fitness {before:.4f} -> {after:.4f} ({'kept' if keep else 'discarded'})")
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(
            torch.as_tensor(result.x if keep else x0, dtype=torch.float32), params
        )
    trained.metrics.update(
        es_dev_before=before, es_dev_after=after, es_kept=keep, es_generations=len(result.history)
    )
    return result.history


def _fitness(
    trained: Trained, opts: TrainOptions, part: RewardMatrix, per_gen: int, max_prompts: int
) -> OfflineFitness:
    cfg, backbone = opts.config, trained.backbone
    assert part.texts is not None
    common: dict[str, Any] = {
        "head_config": trained.head.config.to_json(),
        "reward": part.reward,
        "unit_cost": mean_costs(part),
        "utility_scale": cfg.tau * trained.scale,
        "lam": opts.lam,
        "per_generation": per_gen,
        "seed": cfg.seed,
    }
    desc_texts = tuple(description_text(w.name, w.description, w.model) for w in trained.workers)
    if trained.svf is None:
        feats = encode_prompts(backbone, part.texts, max_tokens=cfg.max_tokens, cache_dir=cfg.cache_dir)
        desc = description_embeddings(backbone, trained.workers, cfg.max_tokens).numpy()
        return OfflineFitness(**common, features=feats, desc=desc)
    rows = np.sort(np.random.default_rng(cfg.seed + 1).permutation(part.n)[:max_prompts])
    n_blocks = blocks_needed(backbone.model, trained.svf.targets)
    batches = capture_block_inputs(
        backbone, [part.texts[i] for i in rows], rows, n_blocks, max_tokens=cfg.max_tokens
    )
    return OfflineFitness(
        **common,
        backbone_spec=cfg.backbone,
        svf_targets=tuple(trained.svf.targets),
        desc_texts=desc_texts,
        max_tokens=cfg.max_tokens,
        batches=batches,
        n_blocks=n_blocks,
    )


def router_utilities(
    checkpoint: Path, data: RewardMatrix, *, cache_dir: Path | None = None, threads: int | None = None
) -> np.ndarray:
    """[N, W] the checkpoint's estimated reward per (prompt, data-set worker): τ·scale·log q, computed with
    the full backbone (SVF offsets applied) exactly as LearnedRouter scores a one-message transcript."""
    import hashlib

    from fugu_cli.router.checkpoint import build_head, load_checkpoint

    if data.texts is None:
        raise UsageError(f"{data.name} has no prompt text: a text router cannot be judged on it.")
    meta, head_state, svf_state = load_checkpoint(checkpoint)
    backbone = load_backbone(meta.backbone, threads=threads)
    variant = ""
    if svf_state:
        apply_svf(backbone.model, list(svf_state)).load_state_dict(svf_state)
        digest = hashlib.sha256()
        for name in sorted(svf_state):
            digest.update(name.encode() + svf_state[name].numpy().tobytes())
        variant = "svf-" + digest.hexdigest()[:16]
    head = build_head(meta, head_state)
    feats = encode_prompts(
        backbone, data.texts, max_tokens=meta.max_tokens, cache_dir=cache_dir, variant=variant
    )
    known = {w.name: i for i, w in enumerate(meta.workers)}
    cols = [meta.workers[known[w]] if w in known else CheckpointWorker(w) for w in data.workers]
    with torch.no_grad():
        desc = description_embeddings(backbone, cols, meta.max_tokens)
        idx = torch.tensor([known.get(w, -1) for w in data.workers], dtype=torch.long)
        logp = torch.log_softmax(head(torch.from_numpy(feats), desc, known=idx), dim=-1).double().numpy()
    scale = float(meta.training.get("reward_scale", 1.0)) * float(meta.tau or 1.0)
    return np.asarray(scale * logp)
