"""`fugu conductor train`: a base model learns to write workflows. Split the outcome data, show each training
prompt a random subset of the pool, warm-start on synthesised valid workflows, then GRPO against an
environment (replay by default), and save the model with what it trained on.

Heavy work goes through `conductor/lm.py`. Never prints: progress goes to `on_step` / `on_log`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.conductor import lm
from fugu_cli.conductor.env import Environment, ReplayEnvironment
from fugu_cli.conductor.replay import Outcome, Replan, Rules
from fugu_cli.conductor.tasks import Item, descriptions, for_conductor, make_items, prompt_of, render
from fugu_cli.conductor.tasks import warm_start as synthesise
from fugu_cli.errors import UsageError
from fugu_cli.router.data import RewardMatrix, id_key, load_dataset, text_key
from fugu_cli.router.splits import SplitSpec, default_split, split_matrix

Log = Callable[[str], None]


@dataclass(frozen=True)
class StepStats:
    """One GRPO step as the progress bar shows it."""

    step: int
    steps: int
    reward: float  # mean research reward of the step's workflows (0 / 0.5 / 1 − λ·USD)
    parse_rate: float  # share of them that parsed and validated
    right: float  # share that were right
    elapsed_s: float  # since GRPO started

    @property
    def left_s(self) -> float:
        return self.elapsed_s / max(self.step, 1) * (self.steps - self.step)


@dataclass(frozen=True)
class TrainSpec:
    """What `fugu conductor train` passes in."""

    data: Path
    base: Path
    out: Path
    split: str | None = None  # None: the data set's own test split if it has one, else kfold:5:0:0
    lm: lm.LMConfig = field(default_factory=lm.LMConfig)
    rules: Rules = field(default_factory=Rules)
    min_workers: int = 2
    max_workers: int = 5
    warm_templates: tuple[str, ...] = ("single", "solve_check", "two_and_merge")


@dataclass
class _Recorder:
    """The figures of each reward call (one per GRPO step), for the progress bar and the history."""

    rows: list[dict[str, float]] = field(default_factory=list)

    def add(self, outcomes: Sequence[Outcome], rewards: Sequence[float]) -> None:
        self.rows.append(
            {
                "reward": float(np.mean(rewards)),
                "parse_rate": float(np.mean([o.valid for o in outcomes])),
                "right": float(np.mean([o.right for o in outcomes])),
                "cost": float(np.mean([o.cost for o in outcomes])),
            }
        )


def load_training(spec: TrainSpec) -> tuple[RewardMatrix, str]:
    """The training part of the data, with short worker names, and the split it came from."""
    full = for_conductor(load_dataset(spec.data).complete())
    if full.texts is None:
        raise UsageError(f"{full.name}: the conductor reads each task's text, and this data set has none.")
    split = SplitSpec.parse(spec.split or default_split(full))
    train = split_matrix(full, split).train
    if train.n < 2 or len(train.workers) < 2:
        raise UsageError(
            f"{full.name}: need at least 2 prompts and 2 workers (have {train.n} × {len(train.workers)})"
        )
    return train, str(split)


def train(
    spec: TrainSpec,
    env: Environment | None = None,
    on_step: Callable[[StepStats], None] | None = None,
    on_log: Log | None = None,
    data: RewardMatrix | None = None,
) -> dict[str, Any]:
    """Warm start, GRPO, save; returns the metadata saved beside the weights. `env` (default: replay on the
    training part of `spec.data`) scores the workflows; `data` (default: that training part) gives the
    prompts, the workers and their descriptions."""
    log = on_log or (lambda _m: None)
    started = time.monotonic()
    data, split = (data, "all") if data is not None else load_training(spec)
    env = env or ReplayEnvironment(data, spec.rules, seed=spec.lm.seed)
    rng = np.random.default_rng(spec.lm.seed)
    about = descriptions(data)
    allow = spec.rules.max_depth > 0
    log(f"{data.name}: {data.n} training prompts × {len(data.workers)} workers (split {split})")
    losses: list[float] = []  # the warm start's loss per step
    policy = lm.load(spec.base, device=spec.lm.device, threads=spec.lm.threads)
    cfg = spec.lm
    if cfg.sft_steps > 0:
        warm = make_items(
            data, range(data.n), rng, min_workers=spec.min_workers, max_workers=spec.max_workers
        )
        log(f"warm start: {cfg.sft_steps} steps on {len(warm)} synthesised workflows")
        plans = synthesise(warm, rng, spec.warm_templates)
        warm_started = time.monotonic()
        lm.sft(
            policy,
            [prompt_of(i, about, allow_conductor=allow) for i in warm],
            plans,
            cfg,
            lambda k, of, figures: log(_warm_line(k, of, losses, figures, time.monotonic() - warm_started)),
        )
    needed = cfg.steps * cfg.prompts_per_step
    rows = [t for _ in range(math.ceil(needed / data.n)) for t in range(data.n)]
    items = make_items(data, rows, rng, min_workers=spec.min_workers, max_workers=spec.max_workers)
    prompts = [prompt_of(i, about, allow_conductor=allow) for i in items]
    recorder = _Recorder()

    def reward(completions: list[str], ids: list[int]) -> list[float]:
        outs = [
            env.outcome(items[i], c, _replan(policy, items[i], about, spec))
            for c, i in zip(completions, ids, strict=True)
        ]
        values = [o.reward(spec.rules.lam) for o in outs]
        recorder.add(outs, values)
        return values

    def step(k: int, of: int, figures: dict[str, float]) -> None:
        last = recorder.rows[-1] if recorder.rows else {"reward": 0.0, "parse_rate": 0.0, "right": 0.0}
        stats = StepStats(
            k, of, last["reward"], last["parse_rate"], last["right"], time.monotonic() - grpo_started
        )
        if on_step is not None:
            on_step(stats)

    log(f"GRPO: {cfg.steps} steps × {cfg.prompts_per_step} prompts × {cfg.group} workflows")
    grpo_started = time.monotonic()  # the time left is GRPO's own: the warm start before it is done
    lm.grpo(policy, prompts, reward, cfg, step)
    meta = {
        "base": str(spec.base.resolve()),
        "data": data.name,
        "source": {"path": str(spec.data.resolve()), "split": split, "env": type(env).__name__},
        "workers": list(data.workers),
        "train_rows": {
            "ids": sorted(id_key(p) for p in data.prompt_ids),
            "texts": sorted(text_key(t) for t in data.texts or ()),
        },
        "lm": dataclasses.asdict(cfg),
        "rules": dataclasses.asdict(spec.rules),
        "pool_subsets": [spec.min_workers, spec.max_workers],
        "history": recorder.rows,
        "warm_start_loss": losses,
        "wall_s": round(time.monotonic() - started, 1),
        "peak_memory_mb": round(lm.peak_memory_mb(), 1),
    }
    lm.save(policy, spec.out, meta)
    log(f"saved {spec.out}")
    return meta


def _warm_line(k: int, of: int, losses: list[float], figures: dict[str, float], elapsed: float) -> str:
    """Record the step's loss in `losses` (for the metadata) and say the step:
    `warm start step 3/40 · loss 2.41 · 95 s, about 1170 s left`."""
    losses.append(round(figures.get("loss", float("nan")), 4))
    left = elapsed / max(k, 1) * (of - k)
    return f"warm start step {k}/{of} · loss {losses[-1]:.3f} · {elapsed:.0f} s, about {left:.0f} s left"


def _replan(policy: lm.Policy, item: Item, about: dict[str, str], spec: TrainSpec) -> Replan:
    """Recursion while training: the model being trained plans the part again (greedy)."""

    def replan(task: int, subtask: str, depth: int) -> str | None:
        workers = [(w, about.get(w, "")) for w in item.workers]
        prompt = render(item.text, workers, allow_conductor=depth < spec.rules.max_depth, part=subtask)
        return lm.generate(policy, [prompt], max_new_tokens=spec.lm.completion_tokens)[0]

    return replan
