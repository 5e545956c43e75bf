"""`fugu conductor train` through the real CLI, briefly: warm start (TRL's SFTTrainer) and GRPO (TRL's
GRPOTrainer) with LoRA on a tiny model, a progress line per step, and a model folder with what it trained on;
judging it on the very rows it trained on is refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fugu_cli.conductor.tasks import descriptions, for_conductor, make_items, prompt_of, warm_start
from fugu_cli.router.data import id_key, load_dataset
from tests.conductor.tinylm import build
from tests.conductor.toy import write_toy
from tests.helpers import fugu


@pytest.mark.timeout(1500)  # two trainers' worth of start-up: minutes on a loaded machine
def test_train_writes_a_conductor_that_eval_will_not_judge_on_its_own_rows(tmp_path: Path) -> None:
    data_dir = write_toy(tmp_path / "toy", "cat", n=8)
    data = for_conductor(load_dataset(data_dir).complete())
    items = make_items(data, range(data.n), np.random.default_rng(0))
    corpus = [prompt_of(i, descriptions(data), allow_conductor=True) for i in items]
    base = build(tmp_path / "base", corpus + warm_start(items, np.random.default_rng(0)))
    out = tmp_path / "conductor"
    flags = [
        "--steps",
        "2",
        "--group",
        "2",
        "--prompts-per-step",
        "1",
        "--sft-steps",
        "2",
        "--lora-rank",
        "4",
    ]
    flags += ["--completion-tokens", "16", "--split", "all", "--device", "cpu", "--threads", "1"]
    run = fugu(
        "conductor",
        "train",
        "--data",
        str(data_dir),
        "--base",
        str(base),
        "--out",
        str(out),
        *flags,
        cwd=tmp_path,
        timeout=1400,
    )
    assert run.code == 0, run.stderr
    assert "warm start: 2 steps on 8 synthesised workflows" in run.stderr
    warm = [line for line in run.stderr.splitlines() if line.startswith("warm start step")]
    assert [line.split(" · ")[0] for line in warm] == ["warm start step 1/2", "warm start step 2/2"]
    assert all(" · loss " in line and "left" in line for line in warm)
    steps = [line for line in run.stderr.splitlines() if line.startswith("grpo [")]
    assert len(steps) == 2 and "step 2/2" in steps[-1] and "parse" in steps[-1] and "left" in steps[-1]
    assert f"conductor written to {out}" in run.stdout
    meta = json.loads((out / "conductor.json").read_text())
    assert len(meta["history"]) == 2 and {"reward", "parse_rate", "right", "cost"} <= set(meta["history"][0])
    assert len(meta["warm_start_loss"]) == 2 and all(x > 0 for x in meta["warm_start_loss"])
    assert meta["lm"]["lora_rank"] == 4 and meta["lm"]["beta"] == 0.0  # no KL term by default
    assert sorted(meta["train_rows"]["ids"]) == sorted(id_key(p) for p in data.prompt_ids)
    assert (out / "config.json").is_file() and not (out / "adapter_config.json").exists()  # LoRA folded in

    judged = fugu(
        "conductor", "eval", "--data", str(data_dir), "--conductor", str(out), cwd=tmp_path, timeout=600
    )
    assert judged.code == 2 and "no rows left to judge (8 are rows the conductor trained on)" in judged.stderr
