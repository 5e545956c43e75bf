"""`fugu router train|eval|info` through the real CLI on a tiny data set."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import fugu

TINY = Path(__file__).resolve().parents[1] / "router" / "data" / "tiny"


def test_train_then_eval_then_info(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    trained = fugu(
        "router",
        "train",
        "--data",
        str(TINY),
        "--out",
        str(ckpt),
        "--generations",
        "2",
        "--svf",
        "",
        cwd=tmp_path,
    )
    assert trained.code == 0, trained.stderr
    assert (ckpt / "router.json").is_file() and (ckpt / "router.safetensors").is_file()
    assert "generation 2/2" in trained.stderr and "best" in trained.stderr

    judged = fugu("router", "eval", "--data", str(TINY), "--router", str(ckpt), "--json", cwd=tmp_path)
    assert judged.code == 0, judged.stderr
    report = json.loads(judged.stdout)
    for key in ("router", "best_single", "random", "oracle", "knn", "logreg"):
        assert set(report[key]) >= {"reward", "cost"}
    assert report["oracle"]["reward"] >= report["best_single"]["reward"] >= 0

    info = fugu("router", "info", str(ckpt), cwd=tmp_path)
    assert info.code == 0 and "minilm" in info.stdout and "tiny" in info.stdout


def test_bad_inputs_exit_2(tmp_path: Path) -> None:
    assert (
        fugu("router", "eval", "--data", str(TINY), "--router", str(tmp_path / "nope"), cwd=tmp_path).code
        == 2
    )
    bad = fugu("router", "train", "--data", str(tmp_path), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert bad.code == 2 and bad.stderr.strip()
    assert (
        fugu(
            "router", "train", "--data", str(TINY), "--out", str(tmp_path / "o"), "--stage", "x", cwd=tmp_path
        ).code
        == 2
    )


def test_train_from_the_stores_outcomes(tmp_path: Path) -> None:
    from fugu_cli.store import OutcomeRow, Store

    store = Store(tmp_path / "fugu.db")
    tasks = ["fix the parser bug", "write the README", "speed up the loop", "document the API"]
    for i, task in enumerate(tasks):
        for worker, reward in (("coder", 1.0 if i % 2 == 0 else 0.0), ("writer", 0.0 if i % 2 == 0 else 1.0)):
            store.add_outcome(OutcomeRow(task, worker, reward, 0.01, "eval:test", None))
        store.add_outcome(OutcomeRow(task, "fugu", 1.0, 0.02, "eval:test", None))
    store.close()
    ckpt = tmp_path / "ckpt"
    run = fugu(
        "router",
        "train",
        "--data",
        str(tmp_path / "fugu.db"),
        "--store",
        "--out",
        str(ckpt),
        "--stage",
        "sft",
        "--svf",
        "",
        "--split",
        "all",
        cwd=tmp_path,
    )
    assert run.code == 0, run.stderr
    info = fugu("router", "info", str(ckpt), cwd=tmp_path)
    assert "coder" in info.stdout and "writer" in info.stdout and "fugu:" not in info.stdout
