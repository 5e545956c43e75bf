"""Train / held-out splits of a reward matrix: the data set's own labels, k folds, held-out tasks, or none;
training prompts whose text is also held out are dropped. A dev part is carved out of training for model
selection. Pure numpy; never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fugu_cli.errors import UsageError
from fugu_cli.router.data import RewardMatrix

SplitKind = Literal["given", "kfold", "tasks", "all"]


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


def default_split(data: RewardMatrix) -> str:
    """The data set's own test split when it has train and test labels, else the first of 5 folds."""
    return "given:test" if "test" in set(data.splits) and "train" in set(data.splits) else "kfold:5:0:0"
