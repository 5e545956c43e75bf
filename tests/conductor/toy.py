"""A toy outcome data set for the conductor's tests: four workers, one of which always succeeds."""

from __future__ import annotations

import json
from pathlib import Path

WORKERS = ("ant", "bee", "cat", "dog")


def write_toy(
    folder: Path, good: str, n: int = 48, cost: float = 0.01, workers: tuple[str, ...] = WORKERS
) -> Path:
    """A dataset.toml folder: `good` solves every task, the other `workers` none; an attempt costs `cost`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.toml").write_text(
        'name = "toy"\noutcomes = "outcomes.csv"\nprompts = "prompts.jsonl"\nprompt_id = "pid"\n'
        'model = "model"\nscore = "score"\ncost = "cost"\nprompt_text = "text"\n'
    )
    rows = ["pid,model,score,cost"]
    rows += [f"p{i:03d},{w},{int(w == good)},{cost}" for i in range(n) for w in workers]
    (folder / "outcomes.csv").write_text("\n".join(rows) + "\n")
    texts = [
        json.dumps({"pid": f"p{i:03d}", "text": f"Task {i}: fix bug number {i * 7 % 50}."}) for i in range(n)
    ]
    (folder / "prompts.jsonl").write_text("\n".join(texts) + "\n")
    return folder
