"""Train the checkpoint shipped in the package (fugu_cli/data/router_default/) on swebench_verified_dev.

    python tools/train_default_router.py [--data ../shared/data/swebench_verified_dev] [--stage both]

Trains on all 350 issues (the held-out figures come from `tools/bench_train.py --split kfold:5:0`), maps each
worker to its litellm model id where the model is served by its maker's public API, and prints the checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fugu_cli.router.checkpoint import info_text
from fugu_cli.router.es import ESConfig, GenerationStats
from fugu_cli.router.train import TrainConfig
from fugu_cli.router.trainer import TrainOptions, train_command

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "fugu_cli" / "data" / "router_default"

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
    ap.add_argument(
        "--data", type=Path, default=Path("../shared/data/swebench_verified_dev"), help="from the repo root"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--stage", default="both", choices=["sft", "es", "both"])
    ap.add_argument("--generations", type=int, default=15)
    ap.add_argument("--es-batch", type=int, default=64, help="issues per fitness call")
    ap.add_argument("--lam", type=float, default=0.0, help="ES fitness = reward - λ × cost (USD)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    start = time.perf_counter()
    res = train_command(
        TrainOptions(
            args.data,
            args.out,
            stage=args.stage,
            split="all",
            config=TrainConfig(threads=args.threads, cache_dir=args.cache),
            es=ESConfig(generations=args.generations),
            es_batch=args.es_batch,
            lam=args.lam,
            names={run: name for run, (name, _) in WORKERS.items()},
            models={name: model for name, model in WORKERS.values() if model},
        ),
        on_log=lambda m: print(f"[{time.perf_counter() - start:6.1f}s] {m}", file=sys.stderr, flush=True),
        on_generation=_gen,
    )
    size = sum(p.stat().st_size for p in res.checkpoint.iterdir())
    print(info_text(res.checkpoint))
    print(f"checkpoint size {size / 1024:.0f} KiB, trained in {time.perf_counter() - start:.0f}s")


def _gen(s: GenerationStats) -> None:
    print(
        f"  gen {s.generation:3d}  best {s.best:.4f}  mean {s.mean:.4f}  incumbent {s.incumbent:.4f}",
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    main()
