"""`fugu router train|eval|info` through the real CLI on a tiny data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    # the checkpoint trained on the given split of this very data set: judged on its held-out p4, p5 only;
    # by hand: best single on training rows p1, p2, p6 is a (0.83 vs 0.67), which gets p5 right, p4 wrong
    assert report["split"] == "given:test" and report["n_test"] == 2
    assert report["best_single"] == {"reward": 0.5, "cost": pytest.approx(0.02), "worker": "a"}
    assert report["random"] == {"reward": 0.5, "cost": pytest.approx(0.11)}
    assert report["oracle"]["reward"] == 1.0 and report["oracle"]["cost"] == pytest.approx(0.11)
    front = report["frontier"]
    assert sorted(c for c, _ in front["singles"]) == pytest.approx([0.02, 0.2])
    assert [r for _, r in front["singles"]] == [0.5, 0.5]
    assert front["single_hull"] == [pytest.approx([0.02, 0.5])]  # b is no better and dearer
    assert {"router", "knn", "logreg", "best_single", "random_mix"} <= set(front["methods"])
    assert set(report["choices"]) == {"p4", "p5"}

    refused = fugu(
        "router", "eval", "--data", str(TINY), "--router", str(ckpt), "--split", "given:train", cwd=tmp_path
    )
    assert refused.code == 2 and "trained on" in refused.stderr and "--allow-train-rows" in refused.stderr
    allowed = fugu(
        "router",
        "eval",
        "--data",
        str(TINY),
        "--router",
        str(ckpt),
        "--split",
        "given:train",
        "--allow-train-rows",
        "--json",
        cwd=tmp_path,
    )
    assert allowed.code == 0 and json.loads(allowed.stdout)["train_rows_in_test"] == 3

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


def test_eval_on_an_outside_data_set_without_split_labels(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    args = ("--data", str(TINY), "--out", str(ckpt), "--stage", "sft", "--svf", "", "--lambda", "2")
    assert fugu("router", "train", *args, cwd=tmp_path).code == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "dataset.toml").write_text(
        'name = "other"\noutcomes = "o.csv"\nprompts = "p.jsonl"\nprompt_id = "id"\nmodel = "m"\n'
        'score = "s"\ncost = "c"\nprompt_text = "text"\n'
    )
    rows = ["id,m,s,c"] + [
        f"q{i},{m},{(i + (m == 'b')) % 2},{0.01 if m == 'a' else 0.1}" for i in range(6) for m in "ab"
    ]
    (other / "o.csv").write_text("\n".join(rows) + "\n")
    texts = [
        "Sort a list in Python.",
        "What is 7 times 8?",
        "Reverse a string.",
        "Solve 2x = 10.",
        "Parse JSON.",
        "Add 3 and 4.",
    ]
    (other / "p.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    judged = fugu(
        "router",
        "eval",
        "--data",
        str(other),
        "--router",
        str(ckpt),
        "--json",
        "--plot",
        str(tmp_path / "c.png"),
        cwd=tmp_path,
    )
    assert judged.code == 0, judged.stderr
    report = json.loads(judged.stdout)
    assert report["n_test"] == 6 and report["split"] == "all rows" and report["lambda"] == 2.0
    assert report["baselines_trained_on"]["data"] == "tiny" and report["train_rows_checked"]
    assert report["frontier"]["methods"]["router"]["points"][0][0] == 0.0
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
