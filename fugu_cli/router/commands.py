"""`fugu router train`: load and split the data, run the stages (stage 1 supervised, stage 2 the escalation
policy's search), save the checkpoint with what judging it elsewhere needs (`sources.py`) and the fingerprints
of its rows. `fugu router eval` lives beside it in eval_command.py.

The top of the router package: it may import every other router module and none imports it. Imports torch
through them: import lazily. Never prints: progress goes to `on_log`, `on_progress` and `on_generation`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from fugu_cli.cluster import ClusterSpec, choose
from fugu_cli.config import load_config
from fugu_cli.errors import UsageError
from fugu_cli.router.checkpoint import RouterCheckpoint, save_checkpoint, save_train_rows
from fugu_cli.router.data import stack
from fugu_cli.router.es import GenerationStats
from fugu_cli.router.executor import make_executor
from fugu_cli.router.sources import Source
from fugu_cli.router.splits import SplitSpec, default_split, split_matrix
from fugu_cli.router.stages import Stage
from fugu_cli.router.train import Log, Progress, TrainConfig, train_stage1
from fugu_cli.router.trainer import Stage2, run_stage2


@dataclass(frozen=True)
class TrainOptions:
    """What `fugu router train` passes in. `data` may be several data sets: they are stacked."""

    data: Path | Sequence[Path]
    out: Path
    stage: Stage = "both"
    split: str | None = None
    config: TrainConfig = field(default_factory=TrainConfig)
    stage2: Stage2 = field(default_factory=Stage2)
    names: dict[str, str] | None = None  # data-set worker -> worker name in the checkpoint (pool names)
    models: dict[str, str] | None = None  # worker name (after `names`) -> litellm model id
    store: bool = False
    prices: Path | None = None
    prices_by_source: dict[str, Path] | None = None  # str(data path) -> its price list, when they differ
    processes: int = 1  # embedding and ES fitness: 1 here, more in spawned processes
    executor: str | None = None  # local | ray (None: [executor] in the config, else local)
    ray_address: str | None = None

    def sources(self) -> list[Source]:
        paths = [self.data] if isinstance(self.data, Path) else list(self.data)
        each = self.prices_by_source or {}
        return [Source(Path(p), self.split, self.store, each.get(str(p), self.prices)) for p in paths]


def _cluster(opts: TrainOptions) -> ClusterSpec | None:
    """The Ray cluster the flags or `[executor]` ask for (None: train here)."""
    return choose(load_config(Path.cwd()).executor, opts.executor, opts.ray_address)


@dataclass(frozen=True)
class TrainResult:
    checkpoint: Path
    meta: RouterCheckpoint
    history: list[GenerationStats]


def train_command(
    opts: TrainOptions,
    on_log: Log | None = None,
    on_generation: Callable[[GenerationStats], None] | None = None,
    on_progress: Progress | None = None,
) -> TrainResult:
    """Load data, split, run the asked stages, save the checkpoint and the fingerprints of its rows."""
    log = on_log or (lambda _m: None)
    parts, refs, dropped = [], [], 0
    for src in opts.sources():
        raw = src.raw()
        full = raw.complete().renamed(opts.names or {})
        spec = SplitSpec.parse(src.split or default_split(full))
        split = split_matrix(full, spec)
        parts.append(split.train)
        refs.append(src.to_json(str(spec), raw))
        dropped += split.dropped_duplicates
        log(f"{full.name}: {split.train.n} training prompts × {len(full.workers)} workers (split {spec})")
    train = parts[0] if len(parts) == 1 else stack(parts)
    if train.n < 2 or len(train.workers) < 2:
        raise UsageError(
            f"{train.name}: need at least 2 prompts and 2 workers to train "
            f"(have {train.n} × {len(train.workers)})."
        )
    cfg = opts.config if opts.stage != "es" else replace(opts.config, epochs=0, svf_targets=())
    executor = make_executor(opts.processes, _cluster(opts))
    try:
        trained = train_stage1(train, cfg, log, executor, on_progress)
        models = opts.models or {}
        named = tuple(replace(w, model=models.get(w.name)) for w in trained.workers)
        trained = replace(trained, workers=named)
        history: list[GenerationStats] = []
        if opts.stage in ("es", "both"):
            trained, history = run_stage2(trained, train, cfg, opts.stage2, log, on_generation, executor)
    finally:
        executor.close()
    training = {
        "data": train.name,
        "sources": refs,
        "stage": opts.stage,
        "n_train": train.n,
        "dropped_duplicates": dropped,
        "lambda": cfg.lam,
        "task_scales": trained.scales,
        "cost_source": train.cost_source or "none",
        "seed": cfg.seed,
        "names": dict(opts.names or {}),
    }
    meta = RouterCheckpoint(
        backbone=cfg.backbone,
        workers=trained.workers,
        head={},
        tau=trained.decision.tau,
        max_tokens=cfg.max_tokens,
        training=training,
        metrics=trained.metrics,
        decision=trained.decision,
        escalation=trained.escalation.to_json() if trained.escalation is not None else {},
    )
    meta = save_checkpoint(opts.out, trained.head, trained.svf, meta)
    save_train_rows(opts.out, train)
    log(f"saved {opts.out}")
    return TrainResult(opts.out, meta, history)
