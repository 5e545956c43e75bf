"""`fugu router eval`: judge a checkpoint on rows it never trained on, against baselines fitted on its
training data, and its escalation policy by replay with a check of the stated accuracy
(`escalation_eval.py`).

Rows the checkpoint trained on, and rows of `--train-data`, are refused (or skipped, or allowed, as the flags
say) alike. What it needs travels with the checkpoint (the split and the price table of each data set, the
fingerprints of its rows) or is found again by name and fingerprint, so it runs from any folder; where the
training data itself is not here, the best single comes from the checkpoint's own figures and kNN / logreg
are left out, with a note. The top of the router package beside commands.py. Imports torch through the
backbone: import lazily. Never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.errors import UsageError
from fugu_cli.router.baselines import knn_scores, logreg_scores, single_scores
from fugu_cli.router.checkpoint import (
    RouterCheckpoint,
    known_index,
    load_train_rows,
    read_meta,
    router_scores,
)
from fugu_cli.router.data import (
    RewardMatrix,
    id_key,
    mean_costs,
    stack,
    text_key,
    trained_rows,
    with_price_costs,
)
from fugu_cli.router.escalation import EscalationPolicy, supervised
from fugu_cli.router.escalation_eval import EscalationPart, Replay, escalation_report, part_for
from fugu_cli.router.evaluate import judge
from fugu_cli.router.objective import Scores, lambda_grid, normalised
from fugu_cli.router.sources import Source, recorded
from fugu_cli.router.splits import SplitSpec, split_matrix


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
    verifier_accuracy: float = 0.9  # the check's accuracy in the escalation policy's replay
    worlds: int = 5  # replayed worlds (seeds) each escalation point is averaged over


@dataclass(frozen=True)
class EvalInputs:
    """Everything `judge` needs: the held-out rows and every method's scores on them; and the escalation
    policy over the same rows."""

    test: RewardMatrix
    methods: dict[str, Scores]
    lam: float
    lambdas: list[float]
    scales: dict[str, float]
    info: dict[str, Any]
    escalation: EscalationPart | None = None


def eval_command(opts: EvalOptions) -> dict[str, Any]:
    """The report of `fugu router eval` (what `--json` prints)."""
    inputs = eval_inputs(opts)
    report = judge(inputs.test, inputs.methods, lam=inputs.lam, lambdas=inputs.lambdas, scales=inputs.scales)
    report.update(inputs.info)
    if inputs.escalation is not None:
        replay = Replay(opts.verifier_accuracy, opts.worlds)
        report["escalation"] = escalation_report(
            [inputs.escalation], inputs.lambdas, inputs.lam, replay, report["frontier"], inputs.scales
        )
    if opts.plot is not None:
        from fugu_cli.router.report import plot

        plot(report, str(opts.plot))
    return report


def eval_inputs(opts: EvalOptions) -> EvalInputs:
    """Held-out rows, the checkpoint's scores, the baselines' (fitted on the checkpoint's training data, or
    `--train-data`) and its escalation policy, with one backbone for all."""
    from fugu_cli.router.backbone import load_backbone
    from fugu_cli.router.embed_cache import encode_prompts

    if not 0.0 <= opts.verifier_accuracy <= 1.0:
        raise UsageError(f"--verifier-accuracy {opts.verifier_accuracy}: give a probability in [0, 1]")
    meta = read_meta(opts.router)
    names = dict(meta.training.get("names") or {})
    given = [(p, Source(p, "all", opts.store, opts.prices).load(names)) for p in opts.train_data]
    test, split, info = held_out(opts, meta, names, given)
    train, note = baseline_data(meta, names, test, [m for _, m in given])
    if test.texts is None:
        raise UsageError(f"{test.name}: a text router needs prompt text to be judged.")
    backbone = load_backbone(meta.backbone, threads=opts.threads)
    router = router_scores(opts.router, test, backbone=backbone, cache_dir=opts.cache_dir)
    methods = {"router": router}
    if train is not None:
        if train.texts is None:
            raise UsageError(f"{train.name}: the baselines need prompt text to be fitted.")
        enc = {"max_tokens": meta.max_tokens, "cache_dir": opts.cache_dir}
        train_x = encode_prompts(backbone, train.texts, **enc)  # type: ignore[arg-type]
        test_x = encode_prompts(backbone, test.texts, **enc)  # type: ignore[arg-type]
        cols = [test.workers.index(w) for w in train.workers]
        width = len(test.workers)
        methods["best_single"] = _widen(single_scores(train, test.n), cols, width)
        methods["knn"] = _widen(knn_scores(train, train_x, test_x, k=opts.k), cols, width)
        methods["logreg"] = _widen(logreg_scores(train, train_x, test_x), cols, width)
        info["baselines_trained_on"] = {"data": train.name, "n": train.n, "workers": list(train.workers)}
        info["knn_k"] = opts.k
    else:
        methods["best_single"] = checkpoint_single(meta, test)
        info["baselines_skipped"] = note
    lam = meta.decision.lam
    grid = list(opts.lambdas) or lambda_grid(np.asarray(router.cost), extra=(lam,))
    info.update(split=split, router_checkpoint=str(opts.router))
    scales = {t: s for t, s in dict(meta.training.get("task_scales") or {}).items() if t in set(test.tasks)}
    escalation = escalation_part(meta, test, router, train, opts.verifier_accuracy)
    if escalation is None:
        info["escalation_skipped"] = (
            "the checkpoint has no escalation policy and its training data is not here"
        )
    return EvalInputs(test, methods, lam, grid, scales, info, escalation)


def held_out(
    opts: EvalOptions,
    meta: RouterCheckpoint,
    names: dict[str, str],
    given: list[tuple[Path, RewardMatrix]] | None = None,
) -> tuple[RewardMatrix, str, dict[str, Any]]:
    """The rows to judge on: all of `opts.data`, or its held-out part when `--split` says so or the checkpoint
    trained on a split of this very data set (recognised by its folder, or by its name and prompts); rows the
    checkpoint or `--train-data` trained on are refused (or skipped, or allowed)."""
    raw = Source(opts.data, store=opts.store, prices=opts.prices).raw()
    own = next((r for r in _sources(meta) if recorded(r, opts.data, raw)), None)
    if own is not None and raw.cost is None and opts.prices is None and not opts.store:
        table = Source.from_json(own).table()
        raw = with_price_costs(raw, table) if table else raw
    full = raw.complete().renamed(names)
    split_text = opts.split or (str(own["split"]) if own and own["split"] != "all" else "")
    if split_text and SplitSpec.parse(split_text).kind != "all":
        test = split_matrix(full, SplitSpec.parse(split_text)).test
    else:
        test, split_text = full, ""  # `--split all`: every row (the checks below still apply)
    info: dict[str, Any] = {"train_rows_checked": False, "train_rows_skipped": 0}
    rows = load_train_rows(opts.router)
    if rows is not None:
        test = _unseen(test, rows, f"rows {opts.router} trained on", opts, info, "train_rows")
        info["train_rows_checked"] = True
    for path, data in given or ():
        keys = ({id_key(p) for p in data.prompt_ids}, {text_key(t) for t in data.texts or ()})
        test = _unseen(test, keys, f"rows of --train-data {path}", opts, info, "train_data_rows")
    if test.n == 0:
        raise UsageError(f"{full.name}: no rows left to judge on (split {split_text or 'all'}).")
    return test, split_text or "all rows", info


def _unseen(
    test: RewardMatrix,
    keys: tuple[set[str], set[str]],
    what: str,
    opts: EvalOptions,
    info: dict[str, Any],
    key: str,
) -> RewardMatrix:
    """`test` without the rows in `keys` (problem ids, text fingerprints) when --skip-train-rows; unchanged
    with --allow-train-rows; else a usage error when there are any."""
    hit = trained_rows(test, *keys)
    info[f"{key}_skipped"] = 0
    info[f"{key}_in_test"] = int(hit.sum()) if opts.allow_train_rows else 0
    if not hit.any() or opts.allow_train_rows:
        return test
    if opts.skip_train_rows:
        info[f"{key}_skipped"] = int(hit.sum())
        return test.subset(np.flatnonzero(~hit))
    raise UsageError(
        f"{int(hit.sum())} of {test.n} rows of {test.name} are {what} (same problem id or text). Judge on "
        "rows none of them saw (--split, or --skip-train-rows), or pass --allow-train-rows to judge on them "
        "anyway (the figures will flatter the router or the baselines)."
    )


def baseline_data(
    meta: RouterCheckpoint, names: dict[str, str], test: RewardMatrix, given: list[RewardMatrix]
) -> tuple[RewardMatrix | None, str]:
    """The checkpoint's own training rows (or `--train-data`), restricted to the judged workers; None (and
    why) when they are not here."""
    if given:
        parts = given
    else:
        refs = _sources(meta)
        missing = [r["path"] for r in refs if not Path(r["path"]).exists()]
        if not refs or missing:
            where = ", ".join(missing) or "not recorded"
            return None, (
                f"the data {meta.training.get('data', 'it')} trained on is not here ({where}): best single "
                "from the checkpoint's own training figures; kNN and logreg left out (pass --train-data DIR)"
            )
        # a set whose recorded workers include none judged would only add rows `complete` drops below: not
        # read at all (the shipped checkpoint's five sets, for two of its workers, are one set to read)
        judged = set(test.workers)
        kept = [r for r in refs if _may_share(r, names, judged)] or refs[:1]
        parts = [
            split_matrix(Source.from_json(r).load(names), SplitSpec.parse(str(r["split"]))).train
            for r in kept
        ]
        if len(refs) > 1:  # named as all of them, as when every one is read
            whole = "+".join(str(r.get("name") or "") for r in refs) if len(kept) < len(refs) else ""
            parts = [stack(parts, name=whole)]
    train = parts[0] if len(parts) == 1 else stack(parts)
    workers = [w for w in test.workers if w in train.workers]
    if not workers and not given:
        return None, (
            f"{test.name} shares no worker with the data {meta.training.get('data', 'it')} trained on: best "
            "single from the checkpoint's own training figures; kNN and logreg left out"
        )
    if not workers:
        raise UsageError(f"{test.name} shares no worker with the training data: no baseline can be fitted.")
    sub = train.only(workers).complete()
    if sub.n == 0 and not given:
        return None, (
            f"the data {meta.training.get('data', 'it')} trained on measured no prompt on all of "
            f"{', '.join(workers)}: best single from the checkpoint's own training figures; kNN and logreg "
            "left out"
        )
    if sub.n == 0:
        raise UsageError(f"the training data measured no prompt on all of {', '.join(workers)}.")
    return sub, ""


def checkpoint_single(meta: RouterCheckpoint, test: RewardMatrix) -> Scores:
    """Best single for the budget from the checkpoint's own training figures (each known worker's mean reward
    and cost); a worker it never saw gets the known workers' mean reward and its cost in `test`, as the
    router itself sees such a worker."""
    d = meta.decision
    known = known_index(meta, test.workers)
    if d.prior and d.mean_cost:
        reward = np.asarray(d.prior) + d.lam * np.asarray(d.mean_cost)
    elif meta.escalation:
        reward = EscalationPolicy.from_json(meta.escalation).strength
    else:
        raise UsageError(f"{meta.training.get('data')}: the checkpoint records no training figures.")
    mean_cost = np.asarray(d.mean_cost) if d.mean_cost else np.zeros(len(meta.workers))
    cols = np.clip(known, 0, None)
    base = np.where(known >= 0, reward[cols], float(np.mean(reward)))
    cost = np.where(known >= 0, mean_cost[cols], mean_costs(test))
    return Scores(np.tile(base, (test.n, 1)), cost, 0.0, base)


def escalation_part(
    meta: RouterCheckpoint,
    test: RewardMatrix,
    router: Scores,
    train: RewardMatrix | None,
    accuracy: float,
) -> EscalationPart | None:
    """The checkpoint's escalation policy on `test` (reading the router's text deviations and shrinks); a
    checkpoint without one gets the supervised policy of the baselines' training data."""
    if meta.escalation:
        policy = EscalationPolicy.from_json(meta.escalation)
        known, source = known_index(meta, test.workers), "checkpoint"
    elif train is not None:
        policy = supervised(normalised(train), check_accuracy=accuracy)
        known = np.array([train.workers.index(w) if w in train.workers else -1 for w in test.workers])
        source = "supervised from the baselines' training data (the checkpoint has none)"
    else:
        return None
    cost = router.cost if router.cost.ndim == 1 else router.cost.mean(axis=0)
    return part_for(test, policy, known, router.head, router.shrinks, cost, source)


def _may_share(ref: dict[str, Any], names: dict[str, str], judged: set[str]) -> bool:
    """Whether the recorded source `ref` may measure a judged worker: true unless it records its workers
    (checkpoints from before it did not) and, renamed as in training, none is judged."""
    workers = ref.get("workers")
    if workers is None or not ref.get("name"):
        return True
    return any(names.get(str(w), str(w)) in judged for w in workers)


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
