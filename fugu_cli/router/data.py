"""Reward matrices (prompts × workers: mean reward, mean USD cost) from a dataset.toml folder or the store.

Owns reading outcome CSVs / prompt JSONL, averaging repeated cells, estimating a cost from a price list where
the data set records none, stacking several data sets into one matrix, and the fingerprints (problem id, text
hash) that say which rows a checkpoint trained on. Splits live in `splits.py`. Pure numpy; never prints.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import tomllib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.errors import UsageError

MODES = ("fugu", "ultra")  # eval arms that are modes, not workers
CHARS_PER_TOKEN = 4  # for a cost estimated from a price list: prompt tokens ≈ characters / 4
OUTPUT_TOKENS = 256  # ... plus this many output tokens a prompt (the data sets record no reply lengths)
REPO_COLUMNS = ("repo", "repository")  # a data set whose task column is named so names repositories


@dataclass(frozen=True, eq=False)
class RewardMatrix:
    """N prompts × W workers. `reward[i, j]` is the mean reward of worker j on prompt i (NaN where
    unmeasured), `cost[i, j]` the mean USD cost (None when the data set records no cost). `cost_source` says
    where the cost came from: "recorded", "prices" (estimated from a price list), or "" (none)."""

    name: str
    prompt_ids: tuple[str, ...]
    texts: tuple[str, ...] | None  # None when the data set has no prompt text
    tasks: tuple[str, ...]  # benchmark / repo per prompt ("" when unknown)
    splits: tuple[str, ...]  # the data set's own split label per prompt ("" when none)
    workers: tuple[str, ...]
    reward: np.ndarray  # [N, W] float64
    cost: np.ndarray | None = None  # [N, W] float64
    worker_info: dict[str, dict[str, str]] = field(default_factory=dict)  # display name, org, api model
    cost_source: str = ""
    repo_tasks: frozenset[str] = frozenset()  # tasks that are repositories (model selection holds each out)

    @property
    def n(self) -> int:
        return len(self.prompt_ids)

    def subset(self, idx: Sequence[int] | np.ndarray) -> RewardMatrix:
        ix = np.asarray(idx, dtype=np.int64)
        return dataclasses.replace(
            self,
            prompt_ids=tuple(self.prompt_ids[i] for i in ix),
            texts=None if self.texts is None else tuple(self.texts[i] for i in ix),
            tasks=tuple(self.tasks[i] for i in ix),
            splits=tuple(self.splits[i] for i in ix),
            reward=self.reward[ix],
            cost=None if self.cost is None else self.cost[ix],
        )

    def renamed(self, names: dict[str, str]) -> RewardMatrix:
        """The same matrix with workers renamed (`names` maps old to new; others keep their name)."""
        new = tuple(names.get(w, w) for w in self.workers)
        info = {names.get(w, w): v for w, v in self.worker_info.items()}
        return dataclasses.replace(self, workers=new, worker_info=info)

    def complete(self) -> RewardMatrix:
        """Only the prompts every worker was measured on (training and judging need a full row)."""
        ok = ~np.isnan(self.reward).any(axis=1)
        if self.cost is not None:
            ok &= ~np.isnan(self.cost).any(axis=1)
        return self if ok.all() else self.subset(np.flatnonzero(ok))

    def measured(self) -> np.ndarray:
        """[N, W] bool: cells holding an outcome (a stacked matrix leaves other data sets' workers empty)."""
        return np.asarray(~np.isnan(self.reward))

    def costs(self) -> np.ndarray:
        """[N, W] USD, zeros where the data set has no cost (or the cell is unmeasured)."""
        if self.cost is None:
            return np.zeros_like(self.reward)
        return np.asarray(np.nan_to_num(self.cost, nan=0.0))

    def only(self, workers: Sequence[str]) -> RewardMatrix:
        """The same prompts with only `workers` (in that order)."""
        cols = [self.workers.index(w) for w in workers]
        return dataclasses.replace(
            self,
            workers=tuple(workers),
            reward=self.reward[:, cols],
            cost=None if self.cost is None else self.cost[:, cols],
        )


def mean_costs(data: RewardMatrix) -> np.ndarray:
    """[W] mean USD cost per worker over the prompts it was measured on (zeros when there is no cost)."""
    if data.cost is None or data.n == 0:
        return np.zeros(len(data.workers))
    seen = ~np.isnan(data.cost)
    total = np.where(seen, data.cost, 0.0).sum(axis=0)
    return np.asarray(total / np.maximum(seen.sum(axis=0), 1))


def load_dataset(
    directory: str | Path,
    prices: Path | None = None,
    *,
    price_table: Mapping[str, tuple[float, float]] | None = None,
) -> RewardMatrix:
    """Read a data set folder described by `dataset.toml` (see ../shared/data/README.md). Without a cost
    column, a price list (`prices`, else `price_table`, else the data set's models.csv when it has
    per-million-token prices) gives each prompt an estimated cost: its length in tokens at the input price
    plus OUTPUT_TOKENS at the output price."""
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
    data = _assemble(str(spec.get("name", root.name)), cells, meta, texts, info)
    if str(spec.get("task", "")).lower() in REPO_COLUMNS:
        data = dataclasses.replace(data, repo_tasks=frozenset(data.tasks) - {""})
    if data.cost is None:
        if prices is not None:
            table = read_prices(prices, "model")
        else:
            table = dict(price_table) if price_table is not None else _prices_of(info)
        if table:
            data = with_price_costs(data, table)
    return (
        data if data.cost is None or data.cost_source else dataclasses.replace(data, cost_source="recorded")
    )


def read_prices(path: Path, model_col: str = "model") -> dict[str, tuple[float, float]]:
    """A price list: CSV with the columns model, input_price_per_mtok, output_price_per_mtok (USD)."""
    if not path.is_file():
        raise UsageError(f"no price list at {path} (a CSV: model,input_price_per_mtok,output_price_per_mtok)")
    with path.open(newline="", encoding="utf-8") as fh:
        table = _prices_of({row[model_col]: row for row in csv.DictReader(fh) if row.get(model_col)})
    if not table:
        raise UsageError(f"{path} has no rows with input_price_per_mtok and output_price_per_mtok")
    return table


def _prices_of(rows: dict[str, dict[str, str]]) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for model, row in rows.items():
        p_in, p_out = row.get("input_price_per_mtok"), row.get("output_price_per_mtok")
        if p_in not in (None, "") and p_out not in (None, ""):
            out[model] = (float(p_in), float(p_out))  # type: ignore[arg-type]
    return out


def with_price_costs(data: RewardMatrix, prices: Mapping[str, tuple[float, float]]) -> RewardMatrix:
    """Estimated USD per prompt from per-million-token prices; workers without a price make it all-or-nothing:
    a matrix where only some workers have a cost would not be a cost at all."""
    if data.texts is None or any(w not in prices for w in data.workers):
        return data
    tokens_in = np.array([len(t) / CHARS_PER_TOKEN for t in data.texts])  # [N]
    p_in = np.array([prices[w][0] for w in data.workers])  # [W]
    p_out = np.array([prices[w][1] for w in data.workers])
    cost = (tokens_in[:, None] * p_in[None, :] + OUTPUT_TOKENS * p_out[None, :]) / 1e6
    cost = np.where(np.isnan(data.reward), np.nan, cost)
    return dataclasses.replace(data, cost=cost, cost_source="prices")


def stack(parts: Sequence[RewardMatrix], name: str = "") -> RewardMatrix:
    """Several data sets as one matrix: rows of each, the union of workers (unmeasured cells NaN), tasks
    prefixed with their data set's name so each keeps its own reward scale."""
    workers = tuple(dict.fromkeys(w for p in parts for w in p.workers))
    col = {w: j for j, w in enumerate(workers)}
    n = sum(p.n for p in parts)
    reward = np.full((n, len(workers)), np.nan)
    has_cost = any(p.cost is not None for p in parts)
    cost = np.full_like(reward, np.nan) if has_cost else None
    row = 0
    for p in parts:
        cols = [col[w] for w in p.workers]
        reward[row : row + p.n, cols] = p.reward
        if cost is not None:
            cost[row : row + p.n, cols] = p.costs() if p.cost is None else p.cost
        row += p.n
    texts = None if any(p.texts is None for p in parts) else tuple(t for p in parts for t in p.texts or ())
    info = {w: v for p in parts for w, v in p.worker_info.items()}
    return RewardMatrix(
        name=name or "+".join(p.name for p in parts),
        prompt_ids=tuple(pid for p in parts for pid in p.prompt_ids),
        texts=texts,
        tasks=tuple(f"{p.name}/{t}" if t else p.name for p in parts for t in p.tasks),
        splits=tuple(s for p in parts for s in p.splits),
        workers=workers,
        reward=reward,
        cost=cost,
        worker_info=info,
        cost_source="+".join(sorted({p.cost_source for p in parts} - {""})),
        repo_tasks=frozenset(f"{p.name}/{t}" for p in parts for t in p.repo_tasks),
    )


def concat(parts: Sequence[RewardMatrix]) -> RewardMatrix:
    """Rows of several parts of one data set (same workers), e.g. the held-out folds of a k-fold split."""
    first = parts[0]
    if any(p.workers != first.workers for p in parts):
        raise ValueError("concat needs parts with the same workers; stack() joins different data sets")
    return dataclasses.replace(
        first,
        prompt_ids=tuple(x for p in parts for x in p.prompt_ids),
        texts=None if any(p.texts is None for p in parts) else tuple(t for p in parts for t in p.texts or ()),
        tasks=tuple(t for p in parts for t in p.tasks),
        splits=tuple(s for p in parts for s in p.splits),
        reward=np.vstack([p.reward for p in parts]),
        cost=None
        if first.cost is None
        else np.vstack([p.costs() if p.cost is None else p.cost for p in parts]),
    )


def text_key(text: str) -> str:
    """A prompt's fingerprint: 16 hex digits of the hash of its text with case and spacing folded."""
    return hashlib.blake2b(" ".join(text.split()).lower().encode(), digest_size=8).hexdigest()


def id_key(prompt_id: str) -> str:
    return hashlib.blake2b(prompt_id.encode(), digest_size=8).hexdigest()


def trained_rows(data: RewardMatrix, ids: set[str], texts: set[str]) -> np.ndarray:
    """[N] bool: rows whose problem id or text fingerprint is among a checkpoint's training rows."""
    hit = np.array([id_key(p) in ids for p in data.prompt_ids], dtype=bool)
    if data.texts is not None:
        hit |= np.array([text_key(t) in texts for t in data.texts], dtype=bool)
    return hit


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
        # csv.reader and column numbers, read as csv.DictReader reads them (a missing field is None, the
        # last of two same-named columns counts, blank lines are skipped), at a third of its cost
        rows = csv.reader(fh)
        header = next(rows, [])
        at = {name: i for i, name in enumerate(header)}
        width = len(header)

        def column(name: str) -> int:
            if name not in at:
                raise UsageError(f"{path} has no column {name!r}, which its dataset.toml names.")
            return at[name]

        def optional(name: str | None) -> int | None:
            return at.get(name) if name else None

        i_pid, i_mod, i_score = column(pid), column(mod), column(score)
        i_cost, i_exclude = optional(cost_col), optional(exclude_col)
        i_task, i_split = optional(task_col), optional(split_col)
        for fields in rows:
            if not fields:
                continue
            row: list[Any] = fields if len(fields) >= width else [*fields, *[None] * (width - len(fields))]
            model, value = row[i_mod], row[i_score]
            if model in excluded_models or (i_exclude is not None and _truthy(row[i_exclude] or "")):
                continue
            if value in ("", None):
                continue
            raw_cost = row[i_cost] if i_cost is not None else None
            c = float(raw_cost) if raw_cost not in ("", None) else float("nan")
            prompt = row[i_pid]
            cells[(prompt, model)].append((float(value), c))
            if prompt not in meta:
                task = row[i_task] if i_task is not None else ""
                split = row[i_split] if i_split is not None else ""
                meta[prompt] = (task, split)
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
            reward[pi[p], wi[m]], cost[pi[p], wi[m]] = _means(vals)
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


def _means(vals: list[tuple[float, float]]) -> tuple[float, float]:
    """The means of a cell's (reward, cost) pairs, as numpy's `mean` gives them: under eight values numpy
    adds them in order, as here (one numpy call per cell made most of the 5.6 CPU-s that loading the shipped
    router's five training sets took; 1.6 CPU-s now)."""
    if len(vals) == 1:
        return vals[0]
    if len(vals) < 8:
        n = len(vals)
        return sum(r for r, _ in vals) / n, sum(c for _, c in vals) / n
    arr = np.asarray(vals)
    return float(arr[:, 0].mean()), float(arr[:, 1].mean())


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
