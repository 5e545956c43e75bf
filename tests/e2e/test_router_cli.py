"""`fugu router train|eval|info` through the real CLI on a tiny data set."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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
    # a wrong stage is refused before torch loads (it took seconds to say so)
    args = ("router", "train", "--data", str(TINY), "--out", str(tmp_path / "o"), "--stage", "x")
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fugu_cli", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if "|" in line}
    said = [line for line in run.stderr.splitlines() if "|" not in line]
    assert run.returncode == 2 and said == ["fugu: --stage x: choose sft, es or both"], run.stderr[-2000:]
    assert "fugu_cli.cli" in imported and "torch" not in imported


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


@pytest.fixture(scope="module")
def sft_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stage-1 checkpoint of the tiny set at λ = 2, trained once for the tests below that only judge with
    it (none writes to it; each judges with a FUGU_HOME, so a feature cache, of its own). Trained before the
    per-test FUGU_HOME exists: it gets a home of its own."""
    root = tmp_path_factory.mktemp("sft_tiny")
    ckpt = root / "ckpt"
    args = ("--data", str(TINY), "--out", str(ckpt), "--stage", "sft", "--svf", "", "--lambda", "2")
    home = {"FUGU_HOME": str(root / "home"), "HF_HUB_OFFLINE": "1"}
    trained = fugu("router", "train", *args, cwd=root, env=home)
    assert trained.code == 0, trained.stderr
    return ckpt


def test_eval_on_an_outside_data_set_without_split_labels(tmp_path: Path, sft_tiny: Path) -> None:
    ckpt = sft_tiny
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


def write_set(root: Path, name: str, rows: list[tuple[str, str, str, float, float | None]]) -> Path:
    """A data set folder: rows of (prompt id, text, model, score, cost or None: no cost column)."""
    root.mkdir(parents=True)
    with_cost = all(c is not None for *_, c in rows)
    (root / "dataset.toml").write_text(
        f'name = "{name}"\noutcomes = "o.csv"\nprompts = "p.jsonl"\nprompt_id = "id"\nmodel = "m"\n'
        f'score = "s"\nprompt_text = "text"\n' + ('cost = "c"\n' if with_cost else "")
    )
    head = "id,m,s,c" if with_cost else "id,m,s"
    body = [f"{p},{m},{s}" + (f",{c}" if with_cost else "") for p, _, m, s, c in rows]
    (root / "o.csv").write_text("\n".join([head, *body]) + "\n")
    texts = {p: t for p, t, *_ in rows}
    (root / "p.jsonl").write_text("".join(json.dumps({"id": p, "text": t}) + "\n" for p, t in texts.items()))
    return root


TEXTS = [
    "Sort a list in Python.",
    "What is 7 times 8?",
    "Reverse a string.",
    "Solve 2x = 10.",
    "Parse JSON.",
    "Add 3 and 4.",
    "Rename a git branch.",
    "Count the words in a file.",
    "What is the capital of France?",
    "Merge two dictionaries.",
]


def outcomes(prefix: str, cost: bool = True) -> list[tuple[str, str, str, float, float | None]]:
    """Worker a (cheap) is right on even prompts, b (dear) on all but every third."""
    out: list[tuple[str, str, str, float, float | None]] = []
    for i, text in enumerate(TEXTS):
        out.append((f"{prefix}{i}", text, "a", float(i % 2 == 0), 0.01 if cost else None))
        out.append((f"{prefix}{i}", text, "b", float(i % 3 != 0), 0.1 if cost else None))
    return out


def test_eval_runs_from_anywhere_on_what_the_checkpoint_carries(tmp_path: Path) -> None:
    """Trained on a set costed from a price list; then the set moves and the price list is deleted: eval from
    another folder with no flag finds the set by name and prompts, applies the split it trained on, costs it
    from the carried prices, fits no baseline it cannot (with a note) and reports the escalation policy."""
    data = write_set(tmp_path / "a" / "set", "priced", outcomes("q", cost=False))
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_price_per_mtok,output_price_per_mtok\na,0.1,0.1\nb,10,30\n")
    ckpt = tmp_path / "ckpt"
    trained = fugu(
        "router", "train", "--data", str(data), "--out", str(ckpt), "--prices", str(prices),
        "--svf", "", "--generations", "2", cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert trained.code == 0, trained.stderr
    assert "choosing α, τ" in trained.stderr and "elapsed" in trained.stderr  # the progress bar
    moved = tmp_path / "b" / "copy"
    shutil.copytree(data, moved)
    shutil.rmtree(data)
    prices.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    judged = fugu(
        "router", "eval", "--data", str(moved), "--router", str(ckpt), "--json", cwd=elsewhere, timeout=600
    )
    assert judged.code == 0, judged.stderr
    report = json.loads(judged.stdout)
    assert report["split"] == "kfold:5:0:0" and report["n_test"] == 2  # the held-out fold, found again
    assert report["cost_source"] == "prices" and report["router"]["cost"] > 0
    assert "not here" in report["baselines_skipped"] and "knn" not in report
    esc = report["escalation"]
    assert esc["verifier_accuracy"] == 0.9 and esc["policy"] == "checkpoint"
    assert esc["frontier"] and set(esc["frontier"][0]) == {"cost", "reward"}
    assert set(esc["at_lambda"]) >= {"lambda", "reward", "cost"}


def test_train_data_rows_are_refused_like_the_checkpoints_own(tmp_path: Path, sft_tiny: Path) -> None:
    ckpt = sft_tiny  # its λ plays no part in what is refused, skipped or judged here
    judged = write_set(tmp_path / "judged", "judged", outcomes("q"))
    overlap = write_set(tmp_path / "overlap", "overlap", [r for r in outcomes("z") if r[0] in ("z0", "z1")])
    base = ("router", "eval", "--data", str(judged), "--router", str(ckpt), "--train-data", str(overlap))
    refused = fugu(*base, cwd=tmp_path)
    assert refused.code == 2 and "--train-data" in refused.stderr and "2 of 10 rows" in refused.stderr
    skipped = fugu(*base, "--skip-train-rows", "--json", "--verifier-accuracy", "1", cwd=tmp_path)
    assert skipped.code == 0, skipped.stderr
    report = json.loads(skipped.stdout)
    assert report["n_test"] == 8 and report["train_data_rows_skipped"] == 2
    assert (
        report["baselines_trained_on"]["data"] == "overlap" and report["escalation"]["verifier_accuracy"] == 1
    )
    every = fugu("router", "eval", "--data", str(judged), "--router", str(ckpt), "--split", "all", "--json",
                 cwd=tmp_path)  # fmt: skip
    assert every.code == 0, every.stderr
    assert json.loads(every.stdout)["n_test"] == 10
    strangers = [(p, t, {"a": "c", "b": "d"}[m], s, c) for p, t, m, s, c in outcomes("s")]
    other = write_set(tmp_path / "strangers", "strangers", strangers)
    unknown = fugu("router", "eval", "--data", str(other), "--router", str(ckpt), "--json", cwd=tmp_path)
    assert unknown.code == 0, unknown.stderr  # no baseline can be fitted: a note, not an error
    report = json.loads(unknown.stdout)
    assert "shares no worker" in report["baselines_skipped"] and "knn" not in report and report["escalation"]


DEFAULT = Path(__file__).resolve().parents[2] / "fugu_cli" / "data" / "router_default"
ISSUES = [
    "Fix the off-by-one error in the pagination helper of the admin list view.",
    "The date parser crashes on ISO week dates; make it accept them.",
    "Add a --dry-run flag to the migration command.",
    "Sorting a queryset by an annotated field raises FieldError.",
    "The LaTeX writer drops footnotes inside tables.",
    "simplify() returns a wrong result for nested square roots.",
    "Caching decorator ignores keyword arguments when building the key.",
    "Autodoc fails on a class with a metaclass that defines __signature__.",
    "The CSV exporter writes the header twice when the file is appended.",
    "Matrix inverse of a 1x1 symbolic matrix raises an error.",
]


def test_the_shipped_default_judges_an_unseen_set_from_anywhere_with_escalation(tmp_path: Path) -> None:
    """The packaged checkpoint on outcomes it never saw (two of its workers: a cheap one right on half the
    issues, a dear one on all but every third), from an empty folder with no flag but the check's accuracy:
    the report carries the escalation policy it ships, its frontier and its point at the checkpoint's λ."""
    rows: list[tuple[str, str, str, float, float | None]] = []
    for i, text in enumerate(ISSUES):
        rows.append((f"u{i}", text, "gpt-5-nano", float(i % 2 == 0), 0.01))
        rows.append((f"u{i}", text, "claude-opus-4.5", float(i % 3 != 0), 0.5))
    data = write_set(tmp_path / "unseen", "unseen_issues", rows)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    args = ("--data", str(data), "--router", str(DEFAULT), "--verifier-accuracy", "0.9", "--json")
    judged = fugu("router", "eval", *args, cwd=elsewhere, timeout=1200)
    assert judged.code == 0, judged.stderr
    report = json.loads(judged.stdout)
    assert report["n_test"] == 10 and report["split"] == "all rows"
    esc = report["escalation"]
    assert esc["policy"] == "checkpoint" and esc["verifier_accuracy"] == 0.9
    assert esc["frontier"] and all(set(p) == {"cost", "reward"} for p in esc["frontier"])
    assert esc["at_lambda"]["lambda"] == report["lambda"] == 0.1
    assert 0.0 <= esc["at_lambda"]["reward"] <= 1.0 and esc["at_lambda"]["cost"] > 0
    # somewhere on the sweep a failed check brings the other worker in, and that reaches what neither does
    assert max(attempts for *_, attempts in esc["points"]) > 1.0
    assert max(p["reward"] for p in esc["frontier"]) > max(r for _, r in esc["single_hull"])
