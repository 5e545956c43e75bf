"""`fugu conductor eval`: a conductor's workflows on prompts it never trained on, replayed by the rules of
`conductor/replay.py`, beside baselines that go through the same code: the best single worker, best-of-N
with a judge, a cheap-first cascade (`router.replay.cascade`), fixed workflow templates, random workflows,
and the oracle. The JSON has the shape of `fugu router eval --json`.

Every fixed choice (best single, the N of best-of-N, the cascade's workers, the templates' workers) is made
in hindsight on the judged rows, so the baselines are as strong as a fixed choice can be. Never prints.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.conductor import lm
from fugu_cli.conductor.env import ReplayEnvironment
from fugu_cli.conductor.replay import Outcome, Replan, Rules
from fugu_cli.conductor.tasks import (
    Item,
    descriptions,
    for_conductor,
    make_items,
    prompt_of,
    render,
    template,
)
from fugu_cli.conductor.workflow import MAX_STEPS
from fugu_cli.errors import UsageError
from fugu_cli.router.data import RewardMatrix, id_key, load_dataset, mean_costs, text_key
from fugu_cli.router.objective import normalised, utility
from fugu_cli.router.replay import cascade

ORACLE_NOTE = "per-prompt best worker in hindsight: an upper bound for any conductor under these rules"
JUDGE = "Judge the answers and give the best one."


@dataclass(frozen=True)
class EvalSpec:
    data: Path
    conductor: Path
    lam: float | None = None  # None: the λ the conductor trained with (0 for a base model)
    carry_accuracy: float | None = None  # None: the conductor's training rules
    subset: int | None = None  # show each prompt this many random workers (None: the whole pool)
    best_of: int = 3
    limit: int | None = None  # judge only the first N rows
    seed: int = 0
    max_new_tokens: int = 96
    device: str = "auto"
    threads: int | None = None


Plan = Callable[[Item], str]


def judged_rows(spec: EvalSpec, meta: dict[str, Any]) -> tuple[RewardMatrix, int]:
    """The rows of `spec.data` the conductor never trained on (same problem id or text), and how many were
    left out."""
    data = for_conductor(load_dataset(spec.data).complete())
    if data.texts is None:
        raise UsageError(f"{data.name}: the conductor reads each task's text, and this data set has none.")
    seen = meta.get("train_rows") or {}
    ids, texts = set(seen.get("ids", ())), set(seen.get("texts", ()))
    keep = [
        i
        for i, (p, t) in enumerate(zip(data.prompt_ids, data.texts, strict=True))
        if id_key(p) not in ids and text_key(t) not in texts
    ]
    skipped = data.n - len(keep)
    if spec.limit is not None:
        keep = keep[: spec.limit]
    if not keep:
        raise UsageError(f"{data.name}: no rows left to judge ({skipped} are rows the conductor trained on).")
    return data.subset(keep), skipped


def evaluate(spec: EvalSpec) -> dict[str, Any]:
    """The report `--json` prints."""
    lm.check_folder(spec.conductor)
    meta = lm.read_meta(spec.conductor)
    trained = Rules(**meta["rules"]) if "rules" in meta else Rules()
    rules = Rules(
        carry_accuracy=trained.carry_accuracy if spec.carry_accuracy is None else spec.carry_accuracy,
        lam=trained.lam if spec.lam is None else spec.lam,
        max_depth=trained.max_depth,
    )
    data, skipped = judged_rows(spec, meta)
    rng = np.random.default_rng(spec.seed)
    size = spec.subset or len(data.workers)
    items = make_items(data, range(data.n), rng, min_workers=size, max_workers=size)
    env = ReplayEnvironment(data, rules, seed=spec.seed)
    report: dict[str, Any] = {
        "data": data.name,
        "n_test": data.n,
        "workers": list(data.workers),
        "lambda": rules.lam,
        "cost_source": data.cost_source or "none",
        "conductor_path": str(spec.conductor),
        "train_rows_skipped": skipped,
        "rules": asdict(rules),
        "pool_subset": spec.subset,
    }
    report["oracle"] = {**_oracle(data, items), "note": ORACLE_NOTE}
    rank = _ranking(data, rules.lam)
    best = [_top(rank, it.workers, 1)[0] for it in items]
    report["best_single"] = _judge(env, items, lambda it: template("single", _top(rank, it.workers, 1)))
    report["best_single"]["worker"] = max(set(best), key=best.count)
    report["best_of_n"] = _judge(env, items, lambda it: best_of(_top(rank, it.workers, spec.best_of)))
    report["best_of_n"]["n"] = spec.best_of
    report["cascade"] = _cascade(env, data, items, rank, spec.best_of)
    report["templates"] = {
        name: _judge(env, items, _filled(name, rank)) for name in ("solve_check", "two_and_merge")
    }
    report["random"] = _judge(env, items, _random_plans(spec.seed))
    report["conductor"], report["workflows"] = _conductor(spec, data, items, env, rules)
    return report


def _ranking(data: RewardMatrix, lam: float) -> list[str]:
    """Workers by mean utility at λ on the judged rows, best first (ties: the cheaper)."""
    util = np.nanmean(utility(data, lam), axis=0)
    order = sorted(range(len(data.workers)), key=lambda j: (-util[j], mean_costs(data)[j]))
    return [data.workers[j] for j in order]


def _top(rank: Sequence[str], shown: Sequence[str], k: int) -> list[str]:
    return [w for w in rank if w in shown][:k]


def _filled(name: str, rank: Sequence[str]) -> Plan:
    """Template `name` with the two best workers shown."""
    return lambda it: template(name, _top(rank, it.workers, 2))


def best_of(workers: Sequence[str]) -> str:
    """N attempts at the whole task, then the best of them judges and answers (best-of-N with a judge)."""
    n = min(len(workers), MAX_STEPS - 1)
    steps: list[dict[str, Any]] = [
        {"worker": w, "subtask": "Solve the task.", "access": []} for w in workers[:n]
    ]
    steps.append({"worker": workers[0], "subtask": JUDGE, "access": list(range(n))})
    return json.dumps({"steps": steps})


def _figures(outs: Sequence[Outcome], lam: float, has_cost: bool) -> dict[str, Any]:
    return {
        "reward": float(np.mean([o.right for o in outs])),
        "cost": float(np.mean([o.cost for o in outs])) if has_cost else None,
        "parse_rate": float(np.mean([o.valid for o in outs])),
        "score": float(np.mean([o.reward(lam) for o in outs])),
    }


def _judge(
    env: ReplayEnvironment, items: Sequence[Item], plan: Plan, replan: Replan | None = None
) -> dict[str, Any]:
    outs = [env.outcome(it, plan(it), replan) for it in items]
    return _figures(outs, env.rules.lam, env.data.cost is not None)


def _oracle(data: RewardMatrix, items: Sequence[Item]) -> dict[str, Any]:
    reward, cost = normalised(data), data.costs()
    best, cheapest = [], []
    for it in items:
        cols = [data.workers.index(w) for w in it.workers]
        r, c = reward[it.task, cols], cost[it.task, cols]
        best.append(float(r.max()))
        cheapest.append(float(c[r >= r.max()].min()))
    return {
        "reward": float(np.mean(best)),
        "cost": float(np.mean(cheapest)) if data.cost is not None else None,
    }


def _cascade(
    env: ReplayEnvironment, data: RewardMatrix, items: Sequence[Item], rank: Sequence[str], k: int
) -> dict[str, Any]:
    """The N best workers tried cheapest first until the check passes (the router's replay cascade)."""
    costs = dict(zip(data.workers, mean_costs(data), strict=True))
    rewards, spent = [], []
    for it in items:
        chain = sorted(_top(rank, it.workers, k), key=lambda w: costs[w])
        episode = env.env.run(cascade([data.workers.index(w) for w in chain]), it.task)
        rewards.append(episode.reward)
        spent.append(episode.cost)
    return {
        "reward": float(np.mean(rewards)),
        "cost": float(np.mean(spent)) if data.cost is not None else None,
        "parse_rate": 1.0,
        "score": float(
            np.mean([0.5 + 0.5 * r - env.rules.lam * c for r, c in zip(rewards, spent, strict=True)])
        ),
        "check_accuracy": env.env.config.check_accuracy,
    }


def _random_plans(seed: int) -> Plan:
    """Random valid workflows: 1 to 5 steps, workers drawn from those shown, random earlier steps seen."""
    rng = np.random.default_rng(seed + 1)

    def plan(it: Item) -> str:
        steps = []
        for i in range(int(rng.integers(1, MAX_STEPS + 1))):
            access = [a for a in range(i) if rng.random() < 0.5]
            worker = it.workers[int(rng.integers(len(it.workers)))]
            steps.append({"worker": worker, "subtask": "Solve the task.", "access": access})
        return json.dumps({"steps": steps})

    return plan


def _conductor(
    spec: EvalSpec, data: RewardMatrix, items: Sequence[Item], env: ReplayEnvironment, rules: Rules
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    policy = lm.load(spec.conductor, device=spec.device, threads=spec.threads)
    about = descriptions(data)
    allow = rules.max_depth > 0
    prompts = [prompt_of(it, about, allow_conductor=allow) for it in items]
    texts = lm.generate(policy, prompts, max_new_tokens=spec.max_new_tokens)
    by_task = {it.task: it for it in items}

    def replan(task: int, subtask: str, depth: int) -> str | None:
        it = by_task[task]
        prompt = render(
            it.text,
            [(w, about.get(w, "")) for w in it.workers],
            allow_conductor=depth < rules.max_depth,
            part=subtask,
        )
        return lm.generate(policy, [prompt], max_new_tokens=spec.max_new_tokens)[0]

    outs = [env.outcome(it, text, replan) for it, text in zip(items, texts, strict=True)]
    figures = _figures(outs, rules.lam, data.cost is not None)
    finals = [o.final_worker for o in outs if o.final_worker]
    figures["final_workers"] = {w: finals.count(w) for w in sorted(set(finals))}
    shown = [
        {
            "prompt_id": data.prompt_ids[it.task],
            "reply": text[:400],
            "valid": o.valid,
            "right": o.right,
            "error": o.error,
        }
        for it, text, o in list(zip(items, texts, outs, strict=True))[:5]
    ]
    return figures, shown
