"""λ is one thing: `fugu router train --lambda` moves the checkpoint's choices monotonically toward cheaper
workers, and a session whose --cost-weight is the checkpoint's λ picks what `fugu router eval` says."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from fugu_cli.router.commands import TrainOptions, train_command
from fugu_cli.router.data import load_dataset
from fugu_cli.router.eval_command import EvalOptions, eval_command
from fugu_cli.router.train import TrainConfig
from fugu_cli.types import Message, RouteState, Worker

COOK = [
    "bake a sourdough loaf",
    "season a cast iron pan",
    "make a tomato soup",
    "roast a chicken",
    "poach an egg",
]
CODE = ["fix a python import error", "write a unit test", "refactor a rust module", "debug a segfault in C"]
ASKS = ["How do I {}?", "Explain how to {}.", "Help me {} quickly.", "What is the best way to {}?"]
PREMIUM_USD, BUDGET_USD = 1.0, 0.01


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def write_premium_budget(root: Path) -> Path:
    """ "premium" solves everything for $1; "budget" solves only the cooking prompts, for $0.01. So λ = 0 buys
    premium, λ = 0.5 budget for cooking and premium for code, λ = 2 budget for everything."""
    root.mkdir(parents=True, exist_ok=True)
    rows, prompts = ["pid,part,topic,model,score,cost"], []
    items = [
        (t, a.format(x)) for t, xs in (("cook", COOK), ("code", CODE)) for x, a in itertools.product(xs, ASKS)
    ]
    for i, (topic, text) in enumerate(items):
        part = "test" if i % 4 == 3 else "train"
        rows.append(f"q{i},{part},{topic},premium,1,{PREMIUM_USD}")
        rows.append(f"q{i},{part},{topic},budget,{int(topic == 'cook')},{BUDGET_USD}")
        prompts.append(json.dumps({"pid": f"q{i}", "text": text}))
    (root / "outcomes.csv").write_text("\n".join(rows) + "\n")
    (root / "prompts.jsonl").write_text("\n".join(prompts) + "\n")
    (root / "dataset.toml").write_text(
        'name = "premium_budget"\noutcomes = "outcomes.csv"\nprompts = "prompts.jsonl"\nprompt_id = "pid"\n'
        'model = "model"\nscore = "score"\ncost = "cost"\ntask = "topic"\nsplit = "part"\n'
        'prompt_text = "text"\n'
    )
    return root


def config(cache: Path, lam: float) -> TrainConfig:
    return TrainConfig(
        lam=lam,
        alphas=(0.0,),
        taus=(0.1,),
        epochs=150,
        patience=30,
        batch_size=16,
        lr=1e-2,
        svf_targets=(),
        cache_dir=cache,
        dev_fraction=0.15,
        threads=1,
    )


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[float, dict[str, object]]]:
    """Checkpoints trained at λ = 0, 0.5 and 2, and the eval report of each."""
    root = tmp_path_factory.mktemp("lam")
    data = write_premium_budget(root / "data")
    reports = {}
    for lam in (0.0, 0.5, 2.0):
        out = root / f"ckpt-{lam}"
        train_command(TrainOptions(data, out, stage="sft", config=config(root / "cache", lam)))
        reports[lam] = eval_command(EvalOptions(data, out, cache_dir=root / "cache"))
    return root, reports


def test_a_higher_lambda_gives_cheaper_choices(trained: tuple[Path, dict[float, dict[str, object]]]) -> None:
    root, reports = trained
    data = load_dataset(root / "data")
    assert data.cost is not None
    costs = data.cost
    cost = {
        pid: {w: float(costs[i, j]) for j, w in enumerate(data.workers)}
        for i, pid in enumerate(data.prompt_ids)
    }
    spent = []
    for lam, report in reports.items():
        choices = report["choices"]
        assert isinstance(choices, dict) and report["lambda"] == lam
        spent.append(np.mean([cost[pid][w] for pid, w in choices.items()]))
    assert spent == sorted(spent, reverse=True), spent
    assert spent[0] > 0.9 * PREMIUM_USD  # λ = 0: quality only
    assert spent[-1] == pytest.approx(BUDGET_USD)  # λ = 2: a dollar is worth more than any reward here
    middle = reports[0.5]["choices"]
    assert isinstance(middle, dict)
    topic = {pid: t for pid, t in zip(data.prompt_ids, data.tasks, strict=True)}
    assert {w for pid, w in middle.items() if topic[pid] == "cook"} == {"budget"}
    assert {w for pid, w in middle.items() if topic[pid] == "code"} == {"premium"}


def test_a_session_at_the_checkpoints_lambda_picks_what_eval_says(
    trained: tuple[Path, dict[float, dict[str, object]]],
) -> None:
    from fugu_cli.app import router_source
    from fugu_cli.config import Config

    root, reports = trained
    data = load_dataset(root / "data")
    texts = dict(zip(data.prompt_ids, data.texts or (), strict=True))
    pool = [
        Worker("premium", "openai/premium", price_in=10.0, price_out=30.0),
        Worker("budget", "openai/budget", price_in=0.1, price_out=0.4),
    ]
    for lam in (0.5, 2.0):
        said = reports[lam]["choices"]
        assert isinstance(said, dict)
        for weight in (lam, None):  # --cost-weight λ, and no --cost-weight (the checkpoint's own λ)
            source = router_source(Config(router=str(root / f"ckpt-{lam}"), cost_weight=weight), pool)
            # one torch thread, as everything else here (the load would set two, process-wide: for one short
            # prompt a pick then spends most of its CPU in OpenMP threads waiting on each other)
            source.threads = 1
            router = source.make()
            picked = {
                pid: router.pick(
                    RouteState(messages=[Message(role="user", content=texts[pid])], step=0), pool
                ).worker
                for pid in said
            }
            assert picked == said
