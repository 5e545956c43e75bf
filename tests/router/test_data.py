"""Loading reward matrices from dataset.toml folders and fugu's store, and splitting them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from fugu_cli.errors import UsageError
from fugu_cli.router.data import (
    CHARS_PER_TOKEN,
    OUTPUT_TOKENS,
    id_key,
    load_dataset,
    load_store_outcomes,
    mean_costs,
    stack,
    text_key,
    trained_rows,
)
from fugu_cli.router.splits import SplitSpec, dev_split, split_matrix
from fugu_cli.store import OutcomeRow, Store

TINY = Path(__file__).parent / "data" / "tiny"


def test_load_maps_columns_averages_repeats_and_drops_excluded() -> None:
    m = load_dataset(TINY)
    assert m.name == "tiny"
    assert m.workers == ("a", "b")  # "broken" is in exclude_models
    assert m.prompt_ids == ("p1", "p2", "p3", "p4", "p5", "p6", "p7")
    row = {p: i for i, p in enumerate(m.prompt_ids)}
    assert m.reward[row["p2"]].tolist() == [0.5, 1.0]  # two runs of a on p2 are averaged
    assert m.cost is not None
    assert m.cost[row["p2"], 0] == pytest.approx(0.02)
    assert m.reward[row["p6"]].tolist() == [1.0, 1.0]  # the row flagged bad=1 is left out
    assert np.isnan(m.reward[row["p7"], 1])
    assert m.tasks[row["p3"]] == "code" and m.splits[row["p4"]] == "test"
    assert m.texts is not None and m.texts[row["p1"]] == "What is 2 + 2?"


def test_renamed_workers_keep_their_columns() -> None:
    m = load_dataset(TINY)
    r = m.renamed({"a": "alpha"})
    assert r.workers == ("alpha", "b") and np.array_equal(r.reward, m.reward, equal_nan=True)


def test_complete_keeps_only_fully_measured_prompts() -> None:
    assert load_dataset(TINY).complete().prompt_ids == ("p1", "p2", "p3", "p4", "p5", "p6")


def test_given_split_drops_training_duplicates_of_held_out_prompts() -> None:
    s = split_matrix(load_dataset(TINY).complete(), SplitSpec.parse("given:test"))
    assert s.test.prompt_ids == ("p4", "p5")
    # p3 is p4 up to case and spacing
    assert s.train.prompt_ids == ("p1", "p2", "p6")
    assert s.dropped_duplicates == 1


def test_kfold_folds_partition_the_prompts_and_depend_on_the_seed() -> None:
    m = load_dataset(TINY).complete()
    held = [split_matrix(m, SplitSpec.parse(f"kfold:3:0:{f}")).test.prompt_ids for f in range(3)]
    assert sorted(p for fold in held for p in fold) == sorted(m.prompt_ids)
    assert all(len(fold) == 2 for fold in held)
    other = [split_matrix(m, SplitSpec.parse(f"kfold:3:1:{f}")).test.prompt_ids for f in range(3)]
    assert held != other
    s = split_matrix(m, SplitSpec.parse("kfold:3:0:1"))
    assert not set(s.train.prompt_ids) & set(s.test.prompt_ids)


def test_held_out_tasks() -> None:
    s = split_matrix(load_dataset(TINY).complete(), SplitSpec.parse("tasks:code"))
    assert set(s.test.tasks) == {"code"} and set(s.train.tasks) == {"math"}


@pytest.mark.parametrize("bad", ["kfold:1:0:0", "kfold:3:0:3", "tasks:", "nonsense", "given:nosuch"])
def test_bad_splits_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError):
        split_matrix(load_dataset(TINY).complete(), SplitSpec.parse(bad))


def test_split_spec_round_trips() -> None:
    for text in ("given:ood_test", "kfold:5:0:2", "tasks:a,b", "all"):
        assert str(SplitSpec.parse(text)) == text


def test_dev_split_is_disjoint_and_seeded() -> None:
    m = load_dataset(TINY).complete()
    fit, dev = dev_split(m, 0.34, seed=3)
    assert sorted(fit.prompt_ids + dev.prompt_ids) == sorted(m.prompt_ids) and dev.n == 2
    assert dev_split(m, 0.34, seed=3)[1].prompt_ids == dev.prompt_ids


def test_missing_dataset_toml_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"dataset\.toml"):
        load_dataset(tmp_path)


def test_store_outcomes_become_a_reward_matrix(tmp_path: Path) -> None:
    db = tmp_path / "fugu.db"
    store = Store(db)
    rows = [
        ("s1", "fix the test", "opus", 1.0, 0.30),
        ("s2", "fix the test", "opus", 0.0, 0.10),
        ("s2", "fix the test", "mini", 1.0, 0.01),
        ("s3", "add a flag", "opus", 1.0, 0.20),
        ("s3", "add a flag", "fugu", 1.0, 0.25),  # a mode arm of fugu eval, not a worker
    ]
    for sid, task, worker, reward, cost in rows:
        store.add_outcome(OutcomeRow(task, worker, reward, cost, "eval:t", sid))
    store.close()
    m = load_store_outcomes(db)
    assert m.workers == ("mini", "opus")
    assert m.texts is not None
    row = {t: i for i, t in enumerate(m.texts)}
    assert m.reward[row["fix the test"]].tolist() == [1.0, 0.5]
    assert m.cost is not None
    assert m.cost[row["fix the test"], 1] == pytest.approx(0.2)
    assert np.isnan(m.cost[row["add a flag"], 0])
    assert m.complete().n == 1


def test_a_store_without_outcomes_is_empty_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "fugu.db").close()
    m = load_store_outcomes(tmp_path / "fugu.db")
    assert m.n == 0 and m.workers == ()
    foreign = tmp_path / "other.db"
    sqlite3.connect(foreign).execute("CREATE TABLE sessions (id TEXT)").connection.commit()
    with pytest.raises(UsageError, match="not a fugu store"):
        load_store_outcomes(foreign)
    assert [r[0] for r in sqlite3.connect(foreign).execute("SELECT name FROM sqlite_master")] == ["sessions"]


def test_a_price_list_gives_a_cost_estimated_from_prompt_length(tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("model,input_price_per_mtok,output_price_per_mtok\na,1.0,2.0\nb,10.0,30.0\n")
    spec = (TINY / "dataset.toml").read_text().replace('cost = "cost"\n', "")
    root = tmp_path / "tiny"
    root.mkdir()
    for name in ("outcomes.csv", "prompts.jsonl"):
        (root / name).write_text((TINY / name).read_text())
    (root / "dataset.toml").write_text(spec)
    assert load_dataset(root).cost is None  # no cost column, no price list: no cost
    m = load_dataset(root, prices)
    assert m.cost is not None and m.cost_source == "prices"
    assert m.texts is not None
    row = m.prompt_ids.index("p1")
    tokens = len(m.texts[row]) / CHARS_PER_TOKEN
    assert m.cost[row].tolist() == pytest.approx(
        [(tokens * 1.0 + OUTPUT_TOKENS * 2.0) / 1e6, (tokens * 10.0 + OUTPUT_TOKENS * 30.0) / 1e6]
    )
    assert np.isnan(m.cost[m.prompt_ids.index("p7"), 1])  # unmeasured stays unmeasured
    assert load_dataset(TINY).cost_source == "recorded"


def test_stacked_data_sets_keep_their_workers_apart(tmp_path: Path) -> None:
    a = load_dataset(TINY).complete()
    b = a.renamed({"a": "c"})
    both = stack([a, b.subset([0, 1])])
    assert both.workers == ("a", "b", "c") and both.n == a.n + 2
    assert both.measured()[: a.n].tolist() == [[True, True, False]] * a.n
    assert both.measured()[a.n :].tolist() == [[False, True, True]] * 2
    assert both.tasks[0] == "tiny/math"
    assert mean_costs(both)[2] == pytest.approx(np.mean(b.subset([0, 1]).cost[:, 0]))  # type: ignore[index]


def test_training_rows_are_recognised_by_id_or_by_text() -> None:
    m = load_dataset(TINY).complete()
    ids = {id_key("p1")}
    texts = {
        text_key("write a PYTHON function   that reverses a list.")
    }  # p3 and p4, case and spacing folded
    assert [m.prompt_ids[i] for i in np.flatnonzero(trained_rows(m, ids, texts))] == ["p1", "p3", "p4"]


def _as_dict_reader_reads(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """The reading before 2026-12-02 (csv.DictReader, numpy's mean per cell): the faster one's oracle."""
    import csv

    cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row["model"] == "broken" or row["score"] in ("", None):
                continue
            cost = float(row["cost"]) if row.get("cost") not in ("", None) else float("nan")
            cells.setdefault((row["prompt_id"], row["model"]), []).append((float(row["score"]), cost))
    return {k: (np.asarray(v)[:, 0].mean(), np.asarray(v)[:, 1].mean()) for k, v in cells.items()}


def test_outcomes_are_read_as_a_dict_reader_reads_them(tmp_path: Path) -> None:
    """Quoted commas, a blank line, a short row, a repeated column (the last counts), cells measured once,
    three times and nine times (numpy's pairwise sum): the same means, to the bit."""
    rng = np.random.default_rng(0)
    lines = ["prompt_id,model,score,cost,score"]
    for i in range(40):
        for model, runs in (("a", 1), ("b", 3), ("c", 9), ("broken", 2)):
            for _ in range(runs):
                lines.append(f'"p{i},x",{model},0,{rng.random() / 7:.17g},{rng.random():.17g}')
    lines.insert(5, "")
    lines.append('"p40,x",a,0')  # short: no cost and no (last) score, so left out
    lines.append('"p41,x",b,0,,0.25')  # no cost: NaN
    root = tmp_path / "set"
    root.mkdir()
    (root / "outcomes.csv").write_text("\n".join(lines) + "\n")
    (root / "dataset.toml").write_text(
        'outcomes = "outcomes.csv"\nprompt_id = "prompt_id"\nmodel = "model"\nscore = "score"\n'
        'cost = "cost"\nexclude_models = ["broken"]\n'
    )
    m = load_dataset(root)
    expected = _as_dict_reader_reads(root / "outcomes.csv")
    assert m.workers == ("a", "b", "c") and len(m.prompt_ids) == 41
    assert m.cost is not None
    for (prompt, model), (reward, cost) in expected.items():
        i, j = m.prompt_ids.index(prompt), m.workers.index(model)
        assert m.reward[i, j].tobytes() == np.float64(reward).tobytes(), (prompt, model)
        assert m.cost[i, j].tobytes() == np.float64(cost).tobytes(), (prompt, model)


def test_a_column_the_spec_names_but_the_file_lacks_is_a_usage_error(tmp_path: Path) -> None:
    root = tmp_path / "set"
    root.mkdir()
    (root / "outcomes.csv").write_text("prompt_id,model,reward\np1,a,1\n")
    (root / "dataset.toml").write_text(
        'outcomes = "outcomes.csv"\nprompt_id = "prompt_id"\nmodel = "model"\nscore = "score"\n'
    )
    with pytest.raises(UsageError, match=r"has no column 'score'"):
        load_dataset(root)
