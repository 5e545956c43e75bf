"""Train the checkpoint shipped in the package (fugu_cli/data/router_default/) on every shared data set.

    python tools/train_default_router.py [--shared ../shared/data] [--lam 0.1] [--processes 2]

Trains one router on the training part of every data set with prompt text (the data set's own train split,
else folds 1-4 of `kfold:5:0`), so `fugu router eval --data <set> --router fugu_cli/data/router_default`
judges it on the held-out part it never saw; then (stage 2) its escalation policy, by sep-CMA-ES on replayed
episodes with a check right 9 times in 10 (`--verifier-accuracy`). The checkpoint records each set's split,
name, fingerprint and price table, so it is judged from any folder with no other flag. Worker descriptions
name no task or repository (they must carry over to repositories it never saw). SWE-bench runs are renamed to
fugu's pool names with their litellm ids; routellm has no recorded cost, so its cost is estimated from
docs/prices/routellm_gpt4_vs_mixtral.csv, and llmrouter's from its own price list. Prints the checkpoint's
info and size.

    python tools/train_default_router.py --add-escalation

adds to the checkpoint at --out, without retraining its head, stage 1's escalation policy (`supervised`: each
worker's measured mean reward, and its mean weighted by how often an attempt on the prompt fails) from the
training part of each data set it recorded, and records those sets in the portable form (name, fingerprint,
carried price table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from fugu_cli.router.checkpoint import META, info_text, read_meta
from fugu_cli.router.commands import TrainOptions, train_command
from fugu_cli.router.data import stack
from fugu_cli.router.es import ESConfig, GenerationStats
from fugu_cli.router.escalation import supervised
from fugu_cli.router.objective import normalised
from fugu_cli.router.sources import Source
from fugu_cli.router.splits import SplitSpec, split_matrix
from fugu_cli.router.train import TrainConfig
from fugu_cli.router.trainer import Stage2

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fugu_cli" / "data" / "router_default"
PRICES = ROOT / "docs" / "prices"
SETS = (
    "swebench_verified_dev",
    "routerbench_subset",
    "llmrouter_9_small_models",
    "routellm_gpt4_vs_mixtral",
    "routerdc_7b_models",
)
# models served by their maker's public API, outside SWE-bench
OTHER_MODELS = {
    "gpt-4-1106-preview": "openai/gpt-4-1106-preview",
    "gpt-3.5-turbo-1106": "openai/gpt-3.5-turbo-1106",
}

# Leaderboard run -> (worker name, litellm id). Names follow fugu's built-in pool (pool.py) where the model
# is the same, so a user with that key gets the trained identity term. The litellm id is set only for models
# served by their maker's public API; open-weight models served by many hosts (Qwen3-Coder, gpt-oss, Llama 4,
# Devstral, Kimi K2) keep none and are scored from their descriptions.
WORKERS: dict[str, tuple[str, str | None]] = {
    "20251124_mini-v1.16.0_claude-opus-4-5-20251101": (
        "claude-opus-4.5",
        "anthropic/claude-opus-4-5-20251101",
    ),
    "20251118_mini-v1.15.0_gemini-3-pro-preview-20251118": ("gemini-3-pro", "gemini/gemini-3-pro-preview"),
    "20250929_mini-v1.13.3_sonnet-4-5-20250929": ("claude-sonnet", "anthropic/claude-sonnet-4-5-20250929"),
    "20250802_mini-v1.0.0_claude-4-opus-20250514": ("claude-opus-4", "anthropic/claude-opus-4-20250514"),
    "20250726_mini-v1.0.0_claude-sonnet-4-20250514": (
        "claude-sonnet-4",
        "anthropic/claude-sonnet-4-20250514",
    ),
    "20251124_mini-v1.16.0_gpt-5.1-codex": ("gpt-5.1-codex", "openai/gpt-5.1-codex"),
    "20251120_mini-v1.15.0_gpt-5.1-2025-11-13": ("gpt-5.1", "openai/gpt-5.1-2025-11-13"),
    "20250807_mini-v1.7.0_gpt-5": ("gpt-5", "openai/gpt-5"),
    "20250807_mini-v1.7.0_gpt-5-mini": ("gpt-5-mini", "openai/gpt-5-mini"),
    "20250807_mini-v1.7.0_gpt-5-nano": ("gpt-5-nano", "openai/gpt-5-nano"),
    "20250726_mini-v1.0.0_o3-2025-04-16": ("o3", "openai/o3-2025-04-16"),
    "20250726_mini-v1.0.0_o4-mini-2025-04-16": ("o4-mini", "openai/o4-mini-2025-04-16"),
    "20250726_mini-v1.0.0_gemini-2.5-pro": ("gemini-pro", "gemini/gemini-2.5-pro"),
    "20251201_mini-v1.17.1_deepseek-v3.2-reasoner": ("deepseek-reasoner", "deepseek/deepseek-reasoner"),
    "20251124_mini-v1.17.0_minimax-m2": ("minimax-m2", "minimax/MiniMax-M2"),
    "20251201_mini-v1.17.1_glm-4.6": ("glm-4.6", "zai/glm-4.6"),
    "20250822_mini-v1.9.1_glm-4.5": ("glm-4.5", "zai/glm-4.5"),
    "20250802_mini-v1.0.0_qwen3-coder-480b-a35b-instruct": ("qwen3-coder-480b", None),
    "20250803_mini-v1.0.0_qwen2-5-coder-32b-instruct": ("qwen2.5-coder-32b", None),
    "20250807_mini-v1.7.0_gpt-oss-120b": ("gpt-oss-120b", None),
    "20250720_mini-v0.0.0-Llama-4-Maverick-17B-Instruct": ("llama-4-maverick", None),
    "20250807_mini-v1.7.0_kimi-k2-instruct": ("kimi-k2-instruct", None),
    "20251209_mini-v1.17.2_devstral-2512": ("devstral-2512", None),
    "20251209_mini-v1.17.2_devstral-small-2512": ("devstral-small-2512", None),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"), help="from the repo root")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--lam", type=float, default=0.1, help="λ, reward per USD (the default sessions use)")
    ap.add_argument("--stage", default="both", choices=["sft", "es", "both"])
    ap.add_argument("--generations", type=int, default=15)
    ap.add_argument("--verifier-accuracy", type=float, default=0.9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--add-escalation", action="store_true", help="only add stage 1's escalation policy")
    args = ap.parse_args()
    start = time.perf_counter()
    sources = []
    for name in SETS:
        prices = PRICES / f"{name}.csv"
        sources.append(Source(args.shared / name, None, False, prices if prices.is_file() else None))
    if args.add_escalation:
        add_escalation(args.out, sources, args.verifier_accuracy)
        print(info_text(args.out))
        return
    config = TrainConfig(
        lam=args.lam,
        alphas=(0.0, 0.5),
        describe_tasks=False,
        svf_targets=(),
        cv_max_rows=40_000,
        threads=args.threads,
        cache_dir=args.cache,
        check_accuracy=args.verifier_accuracy,
    )
    res = train_command(
        TrainOptions(
            [s.path for s in sources],
            args.out,
            stage=args.stage,
            config=config,
            stage2=Stage2(ESConfig(generations=args.generations, processes=args.processes)),
            names={run: name for run, (name, _) in WORKERS.items()},
            models={name: model for name, model in WORKERS.values() if model} | OTHER_MODELS,
            prices_by_source={str(s.path): s.prices for s in sources if s.prices},
            processes=args.processes,
        ),
        on_log=lambda m: print(f"[{time.perf_counter() - start:7.1f}s] {m}", file=sys.stderr, flush=True),
        on_generation=_gen,
    )
    size = sum(p.stat().st_size for p in res.checkpoint.iterdir())
    print(info_text(res.checkpoint))
    print(f"checkpoint size {size / 1024:.0f} KiB, trained in {time.perf_counter() - start:.0f}s")


def add_escalation(out: Path, sources: list[Source], accuracy: float, attempts: int = 3) -> None:
    """Stage 1's escalation policy from the training part (the recorded split) of each set `out` trained on,
    over its workers in its order; the sets recorded portably. The head, decision and metrics stay."""
    meta = read_meta(out)
    names = dict(meta.training.get("names") or {})
    splits = {Path(r["path"]).name: str(r["split"]) for r in meta.training["sources"]}
    parts, refs = [], []
    for src in sources:
        raw = src.raw()
        split = splits[src.path.name]
        parts.append(split_matrix(raw.complete().renamed(names), SplitSpec.parse(split)).train)
        refs.append(src.to_json(split, raw))
    train = stack(parts)
    order = [train.workers.index(w.name) for w in meta.workers]
    reward = normalised(train, dict(meta.training.get("task_scales") or {}))[:, order]
    policy = supervised(reward, attempts, accuracy)
    if not np.isfinite(policy.value).all():
        raise SystemExit("a worker of the checkpoint has no measured outcome in its training data")
    data = json.loads((out / META).read_text())
    data["escalation"] = policy.to_json()
    data["training"]["sources"] = refs
    (out / META).write_text(json.dumps(data, indent=2) + "\n")


def _gen(s: GenerationStats) -> None:
    print(
        f"  gen {s.generation:3d}  best {s.best:.4f}  mean {s.mean:.4f}  incumbent {s.incumbent:.4f}",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    main()
