"""Embed every prompt of the given data sets into the router's feature cache, in resumable chunks.

    python tools/warm_router_cache.py ../shared/data/swebench_verified_dev ../shared/data/routerbench_subset

Training and `fugu router eval` read the same cache (under $FUGU_HOME, or --cache), so after this they start
at once. Each chunk is saved as it finishes: an interrupted run loses at most one chunk.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fugu_cli.router.backbone import load_backbone
from fugu_cli.router.data import load_dataset
from fugu_cli.router.embed_cache import encode_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path, nargs="+")
    ap.add_argument("--backbone", default="minilm")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=2000)
    ap.add_argument("--cache", type=Path, default=None)
    args = ap.parse_args()
    backbone = load_backbone(args.backbone, threads=args.threads)
    for folder in args.data:
        data = load_dataset(folder)
        if data.texts is None:
            print(f"{data.name}: no prompt text, skipped", file=sys.stderr)
            continue
        texts = list(dict.fromkeys(data.texts))
        start = time.perf_counter()
        for s in range(0, len(texts), args.chunk):
            encode_prompts(
                backbone, texts[s : s + args.chunk], max_tokens=args.max_tokens, cache_dir=args.cache
            )
            done = min(s + args.chunk, len(texts))
            rate = (time.perf_counter() - start) / done
            print(
                f"{data.name}: {done}/{len(texts)} ({rate * 1000:.0f} ms a prompt)",
                file=sys.stderr,
                flush=True,
            )


if __name__ == "__main__":
    main()
