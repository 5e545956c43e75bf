"""Train and judge a router on one data set, print the measured figures (docs/BENCHMARKS.md comes from this).

    python tools/bench_train.py ../shared/data/routerbench_subset --split given:test --lam 30
    python tools/bench_train.py ../shared/data/swebench_verified_dev --split kfold:5:0 --lam 0.3  # pooled
    python tools/bench_train.py ../shared/data/swebench_verified_dev --split loro   # leave one repo out

Each fold's checkpoint is judged exactly as `fugu router eval` judges it (same code: `eval_inputs`, `judge`,
`escalation_report`, with --verifier-accuracy); k folds are pooled by judging all held-out prompts at once,
each prompt scored (and its escalation replayed) by the checkpoint that never saw it. `loro` trains one
checkpoint per repository (task) with that repository held out. `--judge-only` judges the checkpoints an
earlier run (same arguments) left in --out, without training them again. Prints the text report on stderr,
Markdown rows and one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.router.checkpoint import read_meta
from fugu_cli.router.commands import TrainOptions, train_command
from fugu_cli.router.data import concat
from fugu_cli.router.es import ESConfig, GenerationStats
from fugu_cli.router.escalation_eval import Replay, escalation_report
from fugu_cli.router.eval_command import EvalInputs, EvalOptions, eval_inputs
from fugu_cli.router.evaluate import concat_scores, judge
from fugu_cli.router.objective import lambda_grid
from fugu_cli.router.report import render_text
from fugu_cli.router.train import TrainConfig
from fugu_cli.router.trainer import Stage2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path)
    ap.add_argument(
        "--split", default=None, help="given:LABEL, tasks:A,B, kfold:K:SEED:FOLD, or kfold:K:SEED"
    )
    ap.add_argument("--eval-split", default=None, help="judge on this split instead (e.g. given:ood_test)")
    ap.add_argument("--stage", default="sft", choices=["sft", "es", "both"])
    ap.add_argument("--svf", default="", help="SVF targets, comma-separated; '' (default) for head only")
    ap.add_argument("--generations", type=int, default=20)
    ap.add_argument("--es-batch", type=int, default=256, help="prompts per fitness call; 0 = all")
    ap.add_argument("--tau", type=float, default=None, help="one temperature instead of the grid")
    ap.add_argument("--lam", type=float, default=0.0, help="λ, reward per USD")
    ap.add_argument("--shrinks", default=None, help="decision shrink grid, e.g. 0,0.5,1")
    ap.add_argument("--alphas", default=None, help="target shrinkage grid, e.g. 0,0.5")
    ap.add_argument("--rank", type=int, default=12)
    ap.add_argument("--z", type=float, default=None, help="confidence (standard errors) a shrink must clear")
    ap.add_argument("--prices", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fugu-bench"))
    ap.add_argument("--verifier-accuracy", type=float, default=0.9)
    ap.add_argument("--worlds", type=int, default=5)
    ap.add_argument(
        "--judge-only",
        action="store_true",
        help="judge the checkpoints an earlier run left in --out; no training",
    )
    args = ap.parse_args()
    inputs, timings = [], []
    for split in _folds(args.split, args.data):
        name = (split or "default").replace(":", "_").replace("/", "_")
        ckpt = args.out / f"{args.data.name}-{name}-lam{args.lam:g}"
        extra: dict[str, Any] = {"rank": args.rank}
        if args.shrinks:
            extra["shrinks"] = tuple(float(x) for x in args.shrinks.split(","))
        if args.alphas:
            extra["alphas"] = tuple(float(x) for x in args.alphas.split(","))
        if args.tau is not None:
            extra["taus"] = (args.tau,)
        if args.z is not None:
            extra["confidence_z"] = args.z
        cfg = TrainConfig(
            lam=args.lam,
            svf_targets=tuple(t for t in args.svf.split(",") if t),
            threads=args.threads,
            cache_dir=args.cache,
            check_accuracy=args.verifier_accuracy,
            **extra,  # type: ignore[arg-type]
        )
        if args.judge_only:
            timings.append({"split": split, "train_seconds": None, **read_meta(ckpt).metrics})
        else:
            timings.append({"split": split, **train(args, ckpt, split, cfg)})
        opts = EvalOptions(
            args.data,
            ckpt,
            split=args.eval_split or split,
            cache_dir=args.cache,
            threads=args.threads,
            verifier_accuracy=args.verifier_accuracy,
            worlds=args.worlds,
        )
        inputs.append(eval_inputs(replace_prices(opts, args.prices)))
    report = pooled(inputs, Replay(args.verifier_accuracy, args.worlds))
    print(render_text(report), file=sys.stderr)
    print(row(args.data.name, args.eval_split or args.split or "default", report))
    print(escalation_row(args.data.name, args.eval_split or args.split or "default", report))
    print(json.dumps({"timings": timings, "report": report}, default=str))


def train(args: argparse.Namespace, ckpt: Path, split: str | None, cfg: TrainConfig) -> dict[str, Any]:
    """Train one fold's checkpoint; its training time and metrics."""
    start = time.perf_counter()
    res = train_command(
        TrainOptions(
            args.data,
            ckpt,
            stage=args.stage,
            split=split,
            config=cfg,
            stage2=Stage2(ESConfig(generations=args.generations, processes=args.processes), args.es_batch),
            prices=args.prices,
            processes=args.processes,
        ),
        on_log=_log,
        on_generation=_gen,
    )
    return {"train_seconds": time.perf_counter() - start, **res.meta.metrics}


def replace_prices(opts: EvalOptions, prices: Path | None) -> EvalOptions:
    from dataclasses import replace

    return replace(opts, prices=prices)


def pooled(parts: list[EvalInputs], replay: Replay) -> dict[str, Any]:
    """One report over every part's held-out prompts, each scored by its own fold's checkpoint."""
    first = parts[0]
    if len(parts) == 1:
        report = judge(first.test, first.methods, lam=first.lam, lambdas=first.lambdas, scales=first.scales)
        report = {**report, **first.info}
        grid = first.lambdas
    else:
        test = concat([p.test for p in parts])
        methods = {m: concat_scores([p.methods[m] for p in parts]) for m in first.methods}
        grid = lambda_grid(np.asarray(methods["router"].cost).mean(axis=0), extra=(first.lam,))
        report = judge(test, methods, lam=first.lam, lambdas=grid, scales=first.scales)
        report = {**report, "split": f"{len(parts)} folds pooled", "folds": len(parts)}
    esc = [p.escalation for p in parts if p.escalation is not None]
    if esc:
        report["escalation"] = escalation_report(
            esc, grid, first.lam, replay, report["frontier"], first.scales
        )
    return report


def escalation_row(name: str, split: str, rep: dict[str, Any]) -> str:
    """| data | held out | one-shot router at λ | escalation at λ | escalation vs hull: min gap, max gap,
    saving | on or above |"""
    esc = rep.get("escalation")
    if not esc:
        return f"| {name} | {split} | (no escalation) |"
    at, v = esc["at_lambda"], esc["vs_single_hull"]
    cost = "" if rep["router"]["cost"] is None else f" / ${at['cost']:.5f}"
    one = rep["router"]
    one_cost = "" if one["cost"] is None else f" / ${one['cost']:.5f}"
    return (
        f"| {name} | {split} ({rep['n_test']}) | {one['reward']:.4f}{one_cost} | {at['reward']:.4f}{cost} "
        f"({at['attempts']:.2f} attempts) | {v['min_gap']:+.4f} / {v['max_gap']:+.4f} / "
        f"{v['max_saving']:.1%} | {'yes' if v['on_or_above'] else 'NO'} |"
    )


def row(name: str, split: str, rep: dict[str, Any]) -> str:
    """| data | held out | router | best single | kNN | logreg | router vs hull: min gap, max gap, saving |"""
    cells = []
    for m in ("router", "best_single", "knn", "logreg"):
        c = rep[m]["cost"]
        cells.append(f"{rep[m]['reward']:.4f}" + ("" if c is None else f" / ${c:.4f}"))
    v = rep["frontier"]["methods"]["router"]["vs_single_hull"]
    hull = f"{v['min_gap']:+.4f} / {v['max_gap']:+.4f} / {v['max_saving']:.1%}"
    return f"| {name} | {split} ({rep['n_test']}) | " + " | ".join(cells) + f" | {hull} |"


def _folds(split: str | None, data: Path) -> list[str | None]:
    if split and split.startswith("kfold") and len(split.split(":")) == 3:
        _, k, seed = split.split(":")
        return [f"kfold:{k}:{seed}:{f}" for f in range(int(k))]
    if split == "loro":
        from fugu_cli.router.data import load_dataset

        return [f"tasks:{t}" for t in sorted(set(load_dataset(data).tasks))]
    return [split]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _gen(s: GenerationStats) -> None:
    print(
        f"  gen {s.generation:3d}  best {s.best:.4f}  mean {s.mean:.4f}  incumbent {s.incumbent:.4f}",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    main()
