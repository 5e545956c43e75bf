"""`fugu router train` and `fugu router eval`: load and split the data, run the stages, save the checkpoint;
judge a checkpoint on rows it never trained on, with baselines fitted on its own training data.

The top of the router package: it may import every other router module and none imports it. Imports torch
through them: import lazily. Never prints: progress goes to `on_log`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fugu_cli.cluster import ClusterSpec, choose
from fugu_cli.config import load_config
from fugu_cli.errors import UsageError
from fugu_cli.router.baselines import knn_scores, logreg_scores, single_scores
from fugu_cli.router.checkpoint import (
    RouterCheckpoint,
    load_train_rows,
    read_meta,
    router_scores,
    save_checkpoint,
    save_train_rows,
)
from fugu_cli.router.data import RewardMatrix, load_dataset, load_store_outcomes, stack, trained_rows
from fugu_cli.router.es import GenerationStats
from fugu_cli.router.evaluate import judge
from fugu_cli.router.executor import make_executor
from fugu_cli.router.objective import Scores, lambda_grid
from fugu_cli.router.splits import SplitSpec, default_split, split_matrix
from fugu_cli.router.train import Log, TrainConfig, train_stage1
from fugu_cli.router.trainer import Stage2, run_stage2

Stage = Literal["sft", "es", "both"]


@dataclass(frozen=True)
class Source:
    """One data set a checkpoint trains on, and which part of it (recorded so eval can refit baselines)."""

    path: Path
    split: str | None = None  # None: the data set's own test split if it has one, else kfold:5:0:0
    store: bool = False  # a fugu store (SQLite) rather than a dataset.toml folder
    prices: Path | None = None  # price list for a data set without cost

    def load(self, names: dict[str, str] | None = None) -> RewardMatrix:
        full = load_store_outcomes(self.path) if self.store else load_dataset(self.path, self.prices)
        return full.complete().renamed(names or {})

    def to_json(self, split: str) -> dict[str, Any]:
        prices = str(self.prices.resolve()) if self.prices else None
        return {"path": str(self.path.resolve()), "split": split, "store": self.store, "prices": prices}


def stage_named(name: str) -> Stage:
    """The training stage `name` asks for (`--stage`); a usage error otherwise."""
    stages: dict[str, Stage] = {"sft": "sft", "es": "es", "both": "both"}
    if name in stages:
        return stages[name]
    raise UsageError(f"--stage {name}: choose sft, es or both")


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
) -> TrainResult:
    """Load data, split, run the asked stages, save the checkpoint and the fingerprints of its rows."""
    log = on_log or (lambda _m: None)
    parts, refs, dropped = [], [], 0
    for src in opts.sources():
        full = src.load(opts.names)
        spec = SplitSpec.parse(src.split or default_split(full))
        split = split_matrix(full, spec)
        parts.append(split.train)
        refs.append(src.to_json(str(spec)))
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
        trained = train_stage1(train, cfg, log, executor)
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
    )
    meta = save_checkpoint(opts.out, trained.head, trained.svf, meta)
    save_train_rows(opts.out, train)
    log(f"saved {opts.out}")
    return TrainResult(opts.out, meta, history)


@dataclass(frozen=True)
class EvalOptions:
    """What `fugu router eval` passes in."""

    data: Path
    router: Path
    split: str | None = None  # None: all rows, or the held-out part if the checkpoint trained on `data`
    k: int = 10
    plot: Path | None = None
    cache_dir: Path | None = None
    threads: int | None = None
    store: bool = False
    train_data: tuple[Path, ...] = ()  # baselines' training data when the checkpoint's is not at hand
    allow_train_rows: bool = False
    skip_train_rows: bool = False
    prices: Path | None = None
    lambdas: tuple[float, ...] = ()


@dataclass(frozen=True)
class EvalInputs:
    """Everything `judge` needs: the held-out rows and every method's scores on them."""

    test: RewardMatrix
    methods: dict[str, Scores]
    lam: float
    lambdas: list[float]
    scales: dict[str, float]
    info: dict[str, Any]


def eval_command(opts: EvalOptions) -> dict[str, Any]:
    """The report of `fugu router eval` (what `--json` prints)."""
    inputs = eval_inputs(opts)
    report = judge(inputs.test, inputs.methods, lam=inputs.lam, lambdas=inputs.lambdas, scales=inputs.scales)
    report.update(inputs.info)
    if opts.plot is not None:
        from fugu_cli.router.report import plot

        plot(report, str(opts.plot))
    return report


def eval_inputs(opts: EvalOptions) -> EvalInputs:
    """Held-out rows, the checkpoint's scores and the baselines' (fitted on the checkpoint's training data),
    with one backbone for all."""
    from fugu_cli.router.backbone import load_backbone
    from fugu_cli.router.embed_cache import encode_prompts

    meta = read_meta(opts.router)
    names = dict(meta.training.get("names") or {})
    test, split, info = held_out(opts, meta, names)
    train = baseline_data(opts, meta, names, test)
    if test.texts is None or train.texts is None:
        raise UsageError(f"{test.name}: a text router needs prompt text to be judged.")
    backbone = load_backbone(meta.backbone, threads=opts.threads)
    enc = {"max_tokens": meta.max_tokens, "cache_dir": opts.cache_dir}
    train_x = encode_prompts(backbone, train.texts, **enc)  # type: ignore[arg-type]
    test_x = encode_prompts(backbone, test.texts, **enc)  # type: ignore[arg-type]
    router = router_scores(opts.router, test, backbone=backbone, cache_dir=opts.cache_dir)
    cols = [test.workers.index(w) for w in train.workers]
    methods = {
        "router": router,
        "best_single": _widen(single_scores(train, test.n), cols, len(test.workers)),
        "knn": _widen(knn_scores(train, train_x, test_x, k=opts.k), cols, len(test.workers)),
        "logreg": _widen(logreg_scores(train, train_x, test_x), cols, len(test.workers)),
    }
    lam = meta.decision.lam
    grid = list(opts.lambdas) or lambda_grid(np.asarray(router.cost), extra=(lam,))
    info.update(
        split=split,
        router_checkpoint=str(opts.router),
        baselines_trained_on={"data": train.name, "n": train.n, "workers": list(train.workers)},
        knn_k=opts.k,
    )
    scales = {t: s for t, s in dict(meta.training.get("task_scales") or {}).items() if t in set(test.tasks)}
    return EvalInputs(test, methods, lam, grid, scales, info)


def held_out(
    opts: EvalOptions, meta: RouterCheckpoint, names: dict[str, str]
) -> tuple[RewardMatrix, str, dict[str, Any]]:
    """The rows to judge on: all of `opts.data`, or its held-out part when `--split` says so or the
    checkpoint trained on a split of this very data set; rows it trained on are refused (or skipped)."""
    own = next((r for r in _sources(meta) if Path(r["path"]) == opts.data.resolve()), None)
    prices = opts.prices or (Path(own["prices"]) if own and own.get("prices") else None)
    full = Source(opts.data, store=opts.store, prices=prices).load(names)
    split_text = opts.split or (str(own["split"]) if own and own["split"] != "all" else "")
    test = split_matrix(full, SplitSpec.parse(split_text)).test if split_text else full
    info: dict[str, Any] = {"train_rows_checked": False, "train_rows_skipped": 0}
    rows = load_train_rows(opts.router)
    if rows is not None:
        hit = trained_rows(test, *rows)
        info["train_rows_checked"] = True
        if hit.any() and opts.skip_train_rows:
            test = test.subset(np.flatnonzero(~hit))
            info["train_rows_skipped"] = int(hit.sum())
        elif hit.any() and not opts.allow_train_rows:
            raise UsageError(
                f"{int(hit.sum())} of {test.n} rows of {test.name} are rows {opts.router} trained on (same "
                "problem id or text). Judge it on rows it never saw (--split, or --skip-train-rows), or pass "
                "--allow-train-rows to judge it on them anyway (the figures will flatter it)."
            )
        info["train_rows_in_test"] = int(hit.sum()) if opts.allow_train_rows else 0
    if test.n == 0:
        raise UsageError(f"{full.name}: no rows left to judge on (split {split_text or 'none'}).")
    return test, split_text or "all rows", info


def baseline_data(
    opts: EvalOptions, meta: RouterCheckpoint, names: dict[str, str], test: RewardMatrix
) -> RewardMatrix:
    """The checkpoint's own training rows (or `--train-data`), restricted to the judged workers."""
    if opts.train_data:
        parts = [Source(p, "all", opts.store, opts.prices).load(names) for p in opts.train_data]
    else:
        refs = _sources(meta)
        missing = [r["path"] for r in refs if not Path(r["path"]).exists()]
        if not refs or missing:
            raise UsageError(
                f"the baselines are fitted on the data {opts.router} trained on, which is not here "
                f"({', '.join(missing) or 'not recorded'}): pass it with --train-data DIR."
            )
        parts = []
        for r in refs:
            prices = Path(r["prices"]) if r.get("prices") else None
            src = Source(Path(r["path"]), None, bool(r.get("store")), prices)
            parts.append(split_matrix(src.load(names), SplitSpec.parse(str(r["split"]))).train)
    train = parts[0] if len(parts) == 1 else stack(parts)
    workers = [w for w in test.workers if w in train.workers]
    if not workers:
        raise UsageError(f"{test.name} shares no worker with the training data: no baseline can be fitted.")
    sub = train.only(workers).complete()
    if sub.n == 0:
        raise UsageError(f"the training data measured no prompt on all of {', '.join(workers)}.")
    return sub


def _sources(meta: RouterCheckpoint) -> list[dict[str, Any]]:
    return list(meta.training.get("sources") or [])


def _widen(scores: Scores, cols: list[int], width: int) -> Scores:
    """Scores over some of the judged workers, as scores over all of them (the rest can never win)."""
    n = len(scores.base)
    base = np.full((n, width), -np.inf)
    base[:, cols] = scores.base
    cost = np.zeros((n, width)) if scores.cost.ndim == 2 else np.zeros(width)
    if scores.cost.ndim == 2:
        cost[:, cols] = scores.cost
    else:
        cost[cols] = scores.cost
    tie = None if scores.tie is None else np.full(width, -np.inf)
    if tie is not None and scores.tie is not None:
        tie[cols] = scores.tie
    return Scores(base, cost, scores.lam0, tie)
