"""`fugu conductor eval` through the real CLI on an outcome folder the conductor never saw: it runs with no
other flag, its oracle and best-single figures are the outcome file's, every baseline is there, and rows the
conductor trained on are left out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fugu_cli.conductor.evaluate import EvalSpec, evaluate
from fugu_cli.errors import UsageError
from fugu_cli.router.data import id_key
from tests.conductor.tinylm import build
from tests.helpers import fugu

WORKERS = ("ant", "bee", "cat")
COSTS = (0.01, 0.05, 0.2)


def write_outcomes(folder: Path, n: int = 30, seed: int = 3) -> np.ndarray:
    """A dataset.toml folder of 0/1 outcomes (ant 30%, bee 50%, cat 70% solved), fixed costs; the matrix."""
    rng = np.random.default_rng(seed)
    solved = (rng.random((n, 3)) < np.array([0.3, 0.5, 0.7])).astype(int)
    folder.mkdir(parents=True)
    (folder / "dataset.toml").write_text(
        'name = "unseen"\noutcomes = "outcomes.csv"\nprompts = "prompts.jsonl"\nprompt_id = "id"\n'
        'model = "model"\nscore = "ok"\ncost = "usd"\nprompt_text = "text"\n'
    )
    rows = ["id,model,ok,usd"] + [
        f"q{i},{w},{solved[i, j]},{COSTS[j]}" for i in range(n) for j, w in enumerate(WORKERS)
    ]
    (folder / "outcomes.csv").write_text("\n".join(rows) + "\n")
    (folder / "prompts.jsonl").write_text(
        "\n".join(json.dumps({"id": f"q{i}", "text": f"Fix issue {i} in the parser."}) for i in range(n))
        + "\n"
    )
    return solved


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = [f"- {w}: {w}" for w in WORKERS] + [
        '{"steps": [{"worker": "ant", "subtask": "x", "access": []}]}'
    ]
    return build(tmp_path_factory.mktemp("eval") / "tiny", corpus * 20, vocab=300)


@pytest.mark.timeout(1200)  # two CLI runs that import torch and transformers: minutes on a loaded box
def test_eval_json_on_an_unseen_folder_matches_the_outcome_file(tmp_path: Path, model: Path) -> None:
    solved = write_outcomes(tmp_path / "unseen")
    run = fugu(
        "conductor",
        "eval",
        "--data",
        str(tmp_path / "unseen"),
        "--conductor",
        str(model),
        "--json",
        cwd=tmp_path,
        timeout=900,
    )
    assert run.code == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["n_test"] == 30 and report["workers"] == list(WORKERS) and report["train_rows_skipped"] == 0
    assert report["oracle"]["reward"] == pytest.approx(solved.max(axis=1).mean())
    best = int(np.argmax(solved.mean(axis=0)))
    assert report["best_single"]["worker"] == WORKERS[best]
    assert report["best_single"]["reward"] == pytest.approx(solved[:, best].mean())
    assert report["best_single"]["cost"] == pytest.approx(COSTS[best])
    oracle_cost = np.mean(
        [min(c for c, s in zip(COSTS, row, strict=True) if s == row.max()) for row in solved]
    )
    assert report["oracle"]["cost"] == pytest.approx(oracle_cost)
    for name in ("conductor", "best_single", "best_of_n", "cascade", "random"):
        assert {"reward", "cost", "parse_rate"} <= set(report[name]), name
    assert set(report["templates"]) == {"solve_check", "two_and_merge"}
    # best-of-3 with a judge sees every worker: with a sure carry it would reach the oracle; at 0.8 it is
    # between the best single and the oracle
    assert report["best_single"]["reward"] <= report["best_of_n"]["reward"] <= report["oracle"]["reward"]
    assert report["best_of_n"]["cost"] == pytest.approx(sum(COSTS) + COSTS[best])
    assert report["random"]["parse_rate"] == 1.0
    assert 0.0 <= report["conductor"]["parse_rate"] <= 1.0  # an untrained tiny model: whatever it writes

    text = fugu(
        "conductor",
        "eval",
        "--data",
        str(tmp_path / "unseen"),
        "--conductor",
        str(model),
        "--limit",
        "5",
        cwd=tmp_path,
        timeout=900,
    )
    assert text.code == 0, text.stderr
    assert "5 prompts it never trained on" in text.stdout and "best single (" in text.stdout


@pytest.mark.timeout(900)
def test_rows_the_conductor_trained_on_are_left_out_and_none_left_is_a_usage_error(
    tmp_path: Path, model: Path
) -> None:
    write_outcomes(tmp_path / "seen")
    meta = model / "conductor.json"
    spec = EvalSpec(tmp_path / "seen", model, device="cpu", max_new_tokens=24, threads=1)
    try:
        meta.write_text(
            json.dumps({"train_rows": {"ids": [id_key(f"q{i}") for i in range(20)], "texts": []}})
        )
        report = evaluate(spec)
        assert report["train_rows_skipped"] == 20 and report["n_test"] == 10
        meta.write_text(
            json.dumps({"train_rows": {"ids": [id_key(f"q{i}") for i in range(30)], "texts": []}})
        )
        with pytest.raises(
            UsageError, match=r"no rows left to judge \(30 are rows the conductor trained on\)"
        ):
            evaluate(spec)
    finally:
        meta.unlink(missing_ok=True)
    with pytest.raises(UsageError, match="not a Hugging Face model folder"):
        evaluate(EvalSpec(tmp_path / "seen", tmp_path / "nope"))
