"""The conductor's training and judging tasks: a prompt of a reward matrix shown with a random subset of the
pool (names and descriptions), the prompt text a trained conductor reads (the same in training, eval and
serving), and the warm start's workflows synthesised from templates.

Pure Python and numpy; never prints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fugu_cli import prompts
from fugu_cli.conductor.workflow import CONDUCTOR, MAX_STEPS
from fugu_cli.router.data import RewardMatrix, mean_costs

MAX_TASK_CHARS = 600  # a trained conductor reads this much of a task (small models, short windows)
SOLVE = "Solve the task."
TEMPLATES: dict[str, tuple[tuple[str, tuple[int, ...]], ...]] = {
    # name -> steps (subtask, access); the workers are filled in
    "single": ((SOLVE, ()),),
    "solve_check": ((SOLVE, ()), ("Check step 0's answer and fix it.", (0,))),
    "two_and_merge": ((SOLVE, ()), (SOLVE, ()), ("Compare both answers and give the best.", (0, 1))),
}


@dataclass(frozen=True)
class Item:
    """One prompt as the conductor is shown it: row `task` of the data, with the workers `workers`."""

    task: int
    text: str
    workers: tuple[str, ...]


def short_names(workers: Sequence[str]) -> dict[str, str]:
    """Data-set worker ids as short names a small model can write: the part after the last `_`
    (`20251124_mini-v1.16.0_claude-opus-4-5` -> `claude-opus-4-5`) when that keeps them apart."""
    short = {w: w.rsplit("_", 1)[-1].strip().lower() or w for w in workers}
    if len(set(short.values())) < len(workers) or CONDUCTOR in short.values():
        return {w: w for w in workers}
    return short


def for_conductor(data: RewardMatrix) -> RewardMatrix:
    """The matrix with short worker names (see `short_names`)."""
    return data.renamed(short_names(data.workers))


def descriptions(data: RewardMatrix) -> dict[str, str]:
    """A line per worker: its display name where the data set has one, and its mean cost a task."""
    costs = mean_costs(data)
    out = {}
    for j, w in enumerate(data.workers):
        info = data.worker_info.get(w, {})
        name = info.get("name") or info.get("model_name") or w
        price = f", about ${costs[j]:.2f} a task" if data.cost is not None else ""
        out[w] = f"{name}{price}"
    return out


def render(
    task: str,
    workers: Sequence[tuple[str, str]],
    *,
    allow_conductor: bool,
    part: str = "",
    max_chars: int = MAX_TASK_CHARS,
) -> str:
    """The prompt a trained conductor completes with a workflow. `workers`: (name, description)."""
    text = " ".join(task.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    note = f" (or {CONDUCTOR!r} to plan a part again)" if allow_conductor else ""
    lines = "\n".join(f"- {name}: {desc}" if desc else f"- {name}" for name, desc in workers)
    values = {
        "workers": lines,
        "conductor_note": note,
        "task": text,
        "part": f"Plan only this part of it: {' '.join(part.split())[:max_chars]}" if part else "",
        "max_steps": str(MAX_STEPS),
    }
    out = prompts.load("conductor_trained")
    for key, value in values.items():
        out = out.replace("{{" + key + "}}", value)
    return out.replace("\n\n\n", "\n\n") + "\n"


def make_items(
    data: RewardMatrix,
    rows: Sequence[int],
    rng: np.random.Generator,
    *,
    min_workers: int = 2,
    max_workers: int = MAX_STEPS,
) -> list[Item]:
    """One item per row in `rows`, each shown a random subset of the pool (random size and order)."""
    if data.texts is None:
        raise ValueError(f"{data.name}: the conductor needs prompt text, and this data set has none")
    w = len(data.workers)
    lo, hi = min(min_workers, w), min(max_workers, w)
    items = []
    for t in rows:
        k = int(rng.integers(lo, hi + 1))
        pick = rng.permutation(w)[:k]
        items.append(Item(int(t), data.texts[t], tuple(data.workers[j] for j in pick)))
    return items


def prompt_of(item: Item, about: dict[str, str], *, allow_conductor: bool) -> str:
    return render(item.text, [(w, about.get(w, "")) for w in item.workers], allow_conductor=allow_conductor)


def template(name: str, workers: Sequence[str]) -> str:
    """The workflow JSON of template `name` with `workers` (one per step, reused in turn if fewer)."""
    steps = [
        {"worker": workers[i % len(workers)], "subtask": subtask, "access": list(access)}
        for i, (subtask, access) in enumerate(TEMPLATES[name])
    ]
    return json.dumps({"steps": steps})


def warm_start(
    items: Sequence[Item], rng: np.random.Generator, templates: Sequence[str] = tuple(TEMPLATES)
) -> list[str]:
    """A valid workflow per item for supervised warm start: a random template (of `templates`) with random
    workers of the item's pool. It teaches the form, not which worker is good: that is GRPO's to learn."""
    names = list(templates)
    out = []
    for item in items:
        name = names[int(rng.integers(len(names)))]
        order = [item.workers[j] for j in rng.permutation(len(item.workers))]
        out.append(template(name, order))
    return out
