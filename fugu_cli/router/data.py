"""Reward matrices (tasks × workers: mean reward, mean cost) from a `dataset.toml` folder or fugu's store.

Owns reading outcome CSVs / prompt JSONL, averaging repeated cells, and the train/test splits (given, k-fold,
held-out tasks) with cross-side prompt deduplication. Pure numpy; never prints, never writes.
"""

from __future__ import annotations

import csv
import hashlib
import json
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fugu_cli.errors import UsageError

MODES = ("fugu", "ultra")  # eval arms that are modes, not workers

SplitKind = Literal["given", "kfold", "tasks", "all"]


@dataclass(frozen=True, eq=False)
class RewardMatrix:
    """N prompts × W workers. `reward[i, j]` is the mean reward of worker j on prompt i (NaN where
    unmeasured), `cost[i, j]` the mean USD cost (None when the data set records no cost)."""

    name: str
    prompt_ids: tuple[str, ...]
    texts: tuple[str, ...] | None  # None when the data set has no prompt text
    tasks: tuple[str, ...]  # benchmark / repo per prompt ("" when unknown)
    splits: tuple[str, ...]  # the data set's own split label per prompt ("" when none)
    workers: tuple[str, ...]
    reward: np.ndarray  # [N, W] float64
    cost: np.ndarray | None = None  # [N, W] float64
    worker_info: dict[str, dict[str, str]] = field(default_factory=dict)  # display name, org, api model

    @property
    def n(self) -> int:
        return len(self.prompt_ids)

    def subset(self, idx: Sequence[int] | np.ndarray) -> RewardMatrix:
        ix = np.asarray(idx, dtype=np.int64)
        return RewardMatrix(
            name=self.name,
            prompt_ids=tuple(self.prompt_ids[i] for i in ix),
            texts=None if self.texts is None else tuple(self.texts[i] for i in ix),
            tasks=tuple(self.tasks[i] for i in ix),
            splits=tuple(self.splits[i] for i in ix),
            workers=self.workers,
            reward=self.reward[ix],
            cost=None if self.cost is None else self.cost[ix],
            worker_info=self.worker_info,
        )

    def renamed(self, names: dict[str, str]) -> RewardMatrix:
        """The same matrix with workers renamed (`names` maps old to new; others keep their name)."""
        new = tuple(names.get(w, w) for w in self.workers)
        info = {names.get(w, w): v for w, v in self.worker_info.items()}
        return RewardMatrix(
            self.name, self.prompt_ids, self.texts, self.tasks, self.splits, new, self.reward, self.cost, info
        )

    def complete(self) -> RewardMatrix:
        """Only the prompts every worker was measured on (training and judging need a full row)."""
        ok = ~np.isnan(self.reward).any(axis=1)
        if self.cost is not None:
            ok &= ~np.isnan(self.cost).any(axis=1)
        return self if ok.all() else self.subset(np.flatnonzero(ok))


@dataclass(frozen=True)
class SplitSpec:
    """How to split: `given:test` (the data set's own split; test label), `kfold:5:0:2` (k, seed, held-out
    fold), `tasks:mmlu,gsm8k` (hold out whole tasks), or `all` (train on everything, no held-out part)."""

    kind: SplitKind = "given"
    test_label: str = "test"
    k: int = 5
    seed: int = 0
    fold: int = 0
    tasks: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> SplitSpec:
        parts = text.strip().split(":")
        try:
            if parts[0] == "given":
                return cls("given", test_label=parts[1] if len(parts) > 1 and parts[1] else "test")
            if parts[0] == "kfold":
                nums = [int(p) for p in parts[1:]] + [5, 0, 0][len(parts) - 1 :]
                spec = cls("kfold", k=nums[0], seed=nums[1], fold=nums[2])
                if spec.k < 2 or not 0 <= spec.fold < spec.k:
                    raise ValueError("need k >= 2 and 0 <= fold < k")
                return spec
            if parts[0] == "tasks" and len(parts) == 2 and parts[1]:
                return cls("tasks", tasks=tuple(t for t in parts[1].split(",") if t))
            if parts[0] == "all":
                return cls("all")
        except (ValueError, IndexError) as exc:
            raise UsageError(f"Bad --split {text!r}: {exc}") from exc
        raise UsageError(
            f"Bad --split {text!r}: use given[:LABEL], kfold:K:SEED:FOLD, tasks:NAME[,NAME...] or all"
        )

    def __str__(self) -> str:
        if self.kind == "given":
            return f"given:{self.test_label}"
        if self.kind == "kfold":
            return f"kfold:{self.k}:{self.seed}:{self.fold}"
        if self.kind == "tasks":
            return "tasks:" + ",".join(self.tasks)
        return "all"


@dataclass(frozen=True, eq=False)
class Split:
    train: RewardMatrix
    test: RewardMatrix
    dropped_duplicates: int  # training prompts removed because their text is also in the test part


def load_dataset(directory: str | Path) -> RewardMatrix:
    """Read a data set folder described by `dataset.toml` (see ../shared/data/README.md)."""
    root = Path(directory)
    spec_path = root / "dataset.toml"
    if not spec_path.is_file():
        raise UsageError(f"{root} has no dataset.toml: point --data at a folder described by one.")
    with spec_path.open("rb") as fh:
        spec: dict[str, Any] = tomllib.load(fh)
    for key in ("outcomes", "prompt_id", "model", "score"):
        if key not in spec:
            raise UsageError(f"{spec_path} lacks the key {key!r}.")
    cells, meta = _read_outcomes(root / spec["outcomes"], spec)
    texts = _read_prompts(root / spec["prompts"], spec) if "prompts" in spec else None
    info = _read_models(root / spec.get("models", "models.csv"), spec["model"])
    return _assemble(str(spec.get("name", root.name)), cells, meta, texts, info)


def _read_outcomes(
    path: Path, spec: dict[str, Any]
) -> tuple[dict[tuple[str, str], list[tuple[float, float]]], dict[str, tuple[str, str]]]:
    pid, mod, score = spec["prompt_id"], spec["model"], spec["score"]
    cost_col, task_col, split_col = spec.get("cost"), spec.get("task"), spec.get("split")
    exclude_col = spec.get("exclude")
    excluded_models = set(spec.get("exclude_models", []))
    cells: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    meta: dict[str, tuple[str, str]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row[mod] in excluded_models or (exclude_col and _truthy(row.get(exclude_col, ""))):
                continue
            if row[score] in ("", None):
                continue
            c = float(row[cost_col]) if cost_col and row.get(cost_col) not in ("", None) else float("nan")
            cells[(row[pid], row[mod])].append((float(row[score]), c))
            meta.setdefault(
                row[pid],
                (row.get(task_col, "") if task_col else "", row.get(split_col, "") if split_col else ""),
            )
    if not cells:
        raise UsageError(f"{path} holds no usable outcome rows.")
    return cells, meta


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "1.0", "true", "yes")


def _read_prompts(path: Path, spec: dict[str, Any]) -> dict[str, str]:
    key, field_name = spec["prompt_id"], spec.get("prompt_text", "prompt")
    out: dict[str, str] = {}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                out[str(rec[key])] = str(rec.get(field_name) or "")
    return out


def _read_models(path: Path, model_col: str) -> dict[str, dict[str, str]]:
    if not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as fh:
        return {row[model_col]: dict(row) for row in csv.DictReader(fh) if row.get(model_col)}


def _assemble(
    name: str,
    cells: dict[tuple[str, str], list[tuple[float, float]]],
    meta: dict[str, tuple[str, str]],
    texts: dict[str, str] | None,
    info: dict[str, dict[str, str]],
) -> RewardMatrix:
    prompts = sorted(meta) if texts is None else sorted(p for p in meta if p in texts)
    workers = sorted({m for _, m in cells})
    pi = {p: i for i, p in enumerate(prompts)}
    wi = {w: j for j, w in enumerate(workers)}
    reward = np.full((len(prompts), len(workers)), np.nan)
    cost = np.full_like(reward, np.nan)
    for (p, m), vals in cells.items():
        if p in pi:
            arr = np.asarray(vals)
            reward[pi[p], wi[m]] = arr[:, 0].mean()
            cost[pi[p], wi[m]] = arr[:, 1].mean()
    has_cost = not np.isnan(cost).all()
    return RewardMatrix(
        name=name,
        prompt_ids=tuple(prompts),
        texts=None if texts is None else tuple(texts[p] for p in prompts),
        tasks=tuple(meta[p][0] for p in prompts),
        splits=tuple(meta[p][1] for p in prompts),
        workers=tuple(workers),
        reward=reward,
        cost=cost if has_cost else None,
        worker_info={w: info[w] for w in workers if w in info},
    )


def load_store_outcomes(db_path: str | Path) -> RewardMatrix:
    """fugu's own recorded outcomes: the store's `outcomes` table (what `fugu eval` wrote)."""
    from fugu_cli.store import Store

    path = Path(db_path)
    if not path.is_file():
        raise UsageError(f"No fugu store at {path}.")
    store = Store(path, readonly=True)
    try:
        # the "fugu" and "ultra" arms of `fugu eval` are modes, not workers a router could pick
        rows = [(o.task, o.worker, o.reward, o.cost_usd) for o in store.outcomes() if o.worker not in MODES]
    finally:
        store.close()
    cells: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    meta: dict[str, tuple[str, str]] = {}
    texts: dict[str, str] = {}
    for task, worker, reward, cost in rows:
        if task is None or worker is None or reward is None:
            continue
        pid = "store-" + hashlib.sha256(str(task).encode()).hexdigest()[:16]
        cells[(pid, str(worker))].append((float(reward), float("nan") if cost is None else float(cost)))
        meta[pid] = ("store", "")
        texts[pid] = str(task)
    if not cells:
        empty = np.zeros((0, 0))
        return RewardMatrix("store", (), (), (), (), (), empty, None)
    return _assemble("store", cells, meta, texts, {})


def split_matrix(data: RewardMatrix, spec: SplitSpec) -> Split:
    """Train / held-out parts. Training prompts whose text also appears in the held-out part are dropped."""
    n = data.n
    if spec.kind == "all":
        return Split(data, data.subset([]), 0)
    if spec.kind == "given":
        labels = set(data.splits)
        if spec.test_label not in labels:
            raise UsageError(
                f"{data.name} has no split labelled {spec.test_label!r} (labels: {sorted(labels - {''})}); "
                "use --split kfold:5:0:0 or tasks:NAME."
            )
        test = np.array([s == spec.test_label for s in data.splits])
        train = np.array([s == "train" for s in data.splits]) if "train" in labels else ~test
    elif spec.kind == "kfold":
        order = np.random.default_rng(spec.seed).permutation(n)
        test = np.zeros(n, dtype=bool)
        test[np.array_split(order, spec.k)[spec.fold]] = True
        train = ~test
    else:
        unknown = set(spec.tasks) - set(data.tasks)
        if unknown:
            raise UsageError(
                f"{data.name} has no task(s) {sorted(unknown)}; tasks: {sorted(set(data.tasks))}"
            )
        test = np.array([t in spec.tasks for t in data.tasks])
        train = ~test
    train_idx, dropped = _dedup(data, np.flatnonzero(train), np.flatnonzero(test))
    return Split(data.subset(train_idx), data.subset(np.flatnonzero(test)), dropped)


def _dedup(data: RewardMatrix, train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, int]:
    if data.texts is None:
        return train, 0
    held = {_norm(data.texts[i]) for i in test}
    keep = np.array([i for i in train if _norm(data.texts[i]) not in held], dtype=np.int64)
    return keep, len(train) - len(keep)


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def dev_split(data: RewardMatrix, fraction: float = 0.1, seed: int = 0) -> tuple[RewardMatrix, RewardMatrix]:
    """Carve a dev part (for early stopping) out of a training part."""
    order = np.random.default_rng(seed + 7919).permutation(data.n)
    n_dev = max(1, round(data.n * fraction)) if data.n > 1 else 0
    return data.subset(np.sort(order[n_dev:])), data.subset(np.sort(order[:n_dev]))
