"""Worker descriptions built from training data, for the head's description embeddings: display name,
organisation, mean reward, and optionally the tasks a worker does relatively well (never repositories when
the router should transfer to repositories it never saw). Pure numpy; never prints.
"""

from __future__ import annotations

import numpy as np

from fugu_cli.router.checkpoint import CheckpointWorker
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.objective import normalised


def describe_workers(
    data: RewardMatrix, *, tasks: bool = True, top_tasks: int = 3, models: dict[str, str] | None = None
) -> tuple[CheckpointWorker, ...]:
    """One description per worker of `data`, from `data` alone (pass the fitting part: dev must not leak)."""
    reward = normalised(data)
    task_of = np.array(data.tasks)
    names = sorted(set(data.tasks) - {""})
    out = []
    for j, w in enumerate(data.workers):
        info = data.worker_info.get(w, {})
        display = info.get("name") or w.split("/")[-1]
        org = next((p[5:] for p in info.get("tags", "").split("|") if p.startswith("Org: ")), "")
        seen = ~np.isnan(reward[:, j])
        text = display + (f" by {org}" if org else "")
        text += f"; mean reward {np.mean(reward[seen, j]):.2f}" if seen.any() else ""
        if tasks:
            strong = _strong_tasks(reward, task_of, names, j, top_tasks)
            text += "; relatively strong on " + ", ".join(strong) if strong else ""
        out.append(CheckpointWorker(w, text, (models or {}).get(w)))
    return tuple(out)


def _strong_tasks(reward: np.ndarray, task_of: np.ndarray, names: list[str], j: int, top: int) -> list[str]:
    rel = []
    for t in names:
        rows = (task_of == t) & ~np.isnan(reward[:, j])
        if rows.any():
            rel.append((float(reward[rows, j].mean() - np.nanmean(reward[rows])), t))
    return [t.split("/")[-1] for gain, t in sorted(rel, reverse=True)[:top] if gain > 0]
