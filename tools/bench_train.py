"""Train and judge a router on one data set, print the measured figures (docs/BENCHMARKS.md comes from this).

    python tools/bench_train.py ../shared/data/routerbench_subset --split given:test
    python tools/bench_train.py ../shared/data/swebench_verified_dev --split kfold:5:0   # all 5 folds, pooled

Prints one JSON object (the `fugu router eval --json` report, or folds pooled) and a Markdown table row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fugu_cli.router.es import ESConfig, GenerationStats
from fugu_cli.router.evaluate import EvalOptions, eval_command, merge_reports, render_text
from fugu_cli.router.train import TrainConfig
from fugu_cli.router.trainer import TrainOptions, train_command

METHODS = ("router", "best_single", "knn", "logreg", "random", "oracle")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path)
    ap.add_argument(
        "--split", default=None, help="given:LABEL, tasks:A,B, kfold:K:SEED:FOLD, or kfold:K:SEED (all)"
    )
    ap.add_argument(
        "--eval-split", action="append", default=[], help="extra held-out labels (e.g. given:ood_test)"
    )
    ap.add_argument("--stage", default="sft", choices=["sft", "es", "both"])
    ap.add_argument("--svf", default="last:1", help="SVF targets, comma-separated; '' for head only")
    ap.add_argument("--generations", type=int, default=20)
    ap.add_argument(
        "--es-batch", type=int, default=256, help="tasks per fitness call; 0 = all (deterministic)"
    )
    ap.add_argument("--tau", type=float, default=0.1)
    ap.add_argument("--lam", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fugu-bench"))
    args = ap.parse_args()
    splits = _folds(args.split)
    reports, timings = [], []
    for split in splits:
        ckpt = args.out / f"{args.data.name}-{split.replace(':', '_')}"
        cfg = TrainConfig(
            tau=args.tau,
            svf_targets=tuple(t for t in args.svf.split(",") if t),
            threads=args.threads,
            cache_dir=args.cache,
        )
        start = time.perf_counter()
        res = train_command(
            TrainOptions(
                args.data,
                ckpt,
                stage=args.stage,
                split=split,
                config=cfg,
                lam=args.lam,
                es_batch=args.es_batch,
                es=ESConfig(generations=args.generations),
            ),
            on_log=_log,
            on_generation=_gen,
        )
        timings.append({"split": split, "train_seconds": time.perf_counter() - start, **res.meta.metrics})
        for eval_split in [split, *args.eval_split]:
            rep = eval_command(
                EvalOptions(args.data, ckpt, split=eval_split, cache_dir=args.cache, threads=args.threads)
            )
            print(render_text(rep), file=sys.stderr)
            reports.append(rep)
    summary: dict[str, Any] = {"timings": timings}
    by_split: dict[str, list[dict[str, Any]]] = {}
    for r in reports:
        key = r["split"] if not r["split"].startswith("kfold") else "kfold"
        by_split.setdefault(key, []).append(r)
    for key, reps in by_split.items():
        summary[key] = reps[0] if len(reps) == 1 else {**merge_reports(reps), "apgr": _pool_apgr(reps)}
        print(_row(args.data.name, key, summary[key]))
    print(json.dumps(summary, indent=1, default=str))


def _folds(split: str | None) -> list[str]:
    if split and split.startswith("kfold") and len(split.split(":")) == 3:
        _, k, seed = split.split(":")
        return [f"kfold:{k}:{seed}:{f}" for f in range(int(k))]
    return [split or ""]


def _pool_apgr(reports: list[dict[str, Any]]) -> dict[str, dict[str, float]] | None:
    if not reports[0].get("apgr"):
        return None
    out: dict[str, dict[str, float]] = {}
    for group in reports[0]["apgr"]:
        vals = [r["apgr"][group] for r in reports if group in (r.get("apgr") or {})]
        out[group] = {
            m: sum(v[m] for v in vals if v[m] is not None) / max(1, sum(v[m] is not None for v in vals))
            for m in vals[0]
        }
    return out


def _row(name: str, split: str, rep: dict[str, Any]) -> str:
    cells = []
    for m in METHODS:
        c = rep[m]["cost"]
        cells.append(f"{rep[m]['reward']:.4f}" + ("" if c is None else f" / ${c:.4f}"))
    return f"| {name} | {split} | " + " | ".join(cells) + " |"


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
