"""Baselines and metrics of `fugu router eval`, checked against values computed by hand on toy matrices."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.evaluate import (
    apgr,
    best_single,
    choose,
    figure_of,
    judge,
    knn_utilities,
    logreg_utilities,
    merge_reports,
    oracle_figure,
    plot,
    random_figure,
    render_text,
    strong_share_for,
)


def matrix(
    reward: list[list[float]], cost: list[list[float]] | None, tasks: tuple[str, ...] = ()
) -> RewardMatrix:
    n = len(reward)
    return RewardMatrix(
        name="toy",
        prompt_ids=tuple(f"p{i}" for i in range(n)),
        texts=tuple(f"prompt {i}" for i in range(n)),
        tasks=tasks or ("",) * n,
        splits=("",) * n,
        workers=("a", "b"),
        reward=np.array(reward, dtype=float),
        cost=None if cost is None else np.array(cost, dtype=float),
    )


TRAIN = matrix([[1, 0], [1, 0], [0, 1], [1, 1]], [[0.1, 0.01]] * 4)
TEST = matrix(
    [[1, 0], [0, 1], [0, 0], [1, 1]],
    [[0.1, 0.01], [0.2, 0.02], [0.1, 0.01], [0.1, 0.01]],
    tasks=("x", "y", "x", "y"),
)
TRAIN_X = np.array([[1.0, 0.0], [0.8, 0.6], [-1.0, 0.0], [0.0, 1.0]])
TEST_X = np.array([[1.0, 0.0], [-0.8, 0.6], [0.6, 0.8], [0.6, -0.8]])


def test_best_single_is_chosen_on_the_training_part() -> None:
    assert TRAIN.workers[best_single(TRAIN)] == "a"  # 0.75 vs 0.5 on train
    fig = figure_of(TEST, np.full(TEST.n, best_single(TRAIN)))
    assert (fig.reward, fig.cost) == pytest.approx((0.5, 0.125))


def test_random_is_the_exact_expectation_of_a_uniform_choice() -> None:
    fig = random_figure(TEST)
    assert (fig.reward, fig.cost) == pytest.approx((0.5, 0.06875))


def test_oracle_takes_the_best_reward_at_the_cheapest_cost() -> None:
    fig = oracle_figure(TEST)
    assert (fig.reward, fig.cost) == pytest.approx((0.75, 0.035))
    assert oracle_figure(matrix([[0, 1], [1, 0]], None)).cost is None


def test_knn_votes_with_the_mean_reward_of_the_nearest_training_prompts() -> None:
    util = knn_utilities(TRAIN_X, TRAIN.reward, TEST_X, k=2)
    assert util.tolist() == [[1.0, 0.0], [0.5, 1.0], [1.0, 0.5], [1.0, 0.0]]
    fig = figure_of(TEST, choose(util))
    assert (fig.reward, fig.cost) == pytest.approx((0.75, 0.08))


def test_logreg_learns_which_worker_wins_where() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    reward = np.stack([(x[:, 0] > 0), (x[:, 0] <= 0)], axis=1).astype(float)
    xt = rng.normal(size=(100, 3))
    util = logreg_utilities(x, reward, xt)
    assert ((util[:, 0] > util[:, 1]) == (xt[:, 0] > 0)).mean() > 0.95
    assert util.min() >= 0.0 and util.max() <= 1.0


def test_choose_breaks_ties_toward_the_given_preference() -> None:
    util = np.array([[1.0, 1.0], [0.0, 1.0]])
    assert choose(util, np.array([0.2, 0.7])).tolist() == [1, 1]
    assert choose(util, np.array([0.9, 0.7])).tolist() == [0, 1]


def test_apgr_by_hand() -> None:
    strong, weak = np.array([1.0, 1, 0, 1]), np.array([0.0, 1, 0, 0])
    # strong-call order 0, 2, 3, 1 recovers 0, .5, .5, 1, 1 of the gap: trapezoid area 0.625
    assert apgr(np.array([0.9, 0.1, 0.5, 0.3]), strong, weak) == pytest.approx(0.625)
    assert apgr(np.array([0.9, 0.1, 0.2, 0.8]), strong, weak) == pytest.approx(0.75)
    assert apgr(np.zeros(2), np.ones(2), np.ones(2)) is None


def test_strong_share_for_95_percent_by_hand() -> None:
    strong, weak = np.array([1.0, 1, 0, 1]), np.array([0.0, 1, 0, 0])
    # strong alone 0.75, target 0.7125; order 0, 2, 3, 1 gives 0.25, 0.5, 0.5, 0.75: 3 strong calls of 4
    assert strong_share_for(np.array([0.9, 0.1, 0.5, 0.3]), strong, weak) == pytest.approx(0.75)
    assert strong_share_for(np.array([0.9, 0.1, 0.2, 0.8]), strong, weak) == pytest.approx(0.5)


def test_apgr_of_a_random_ordering_averages_one_half() -> None:
    strong, weak = np.array([1.0, 1, 0, 1]), np.array([0.0, 1, 0, 0])
    values = [apgr(-np.array(p, dtype=float), strong, weak) for p in itertools.permutations(range(4))]
    assert np.mean([v for v in values if v is not None]) == pytest.approx(0.5)


def test_judge_reports_every_method_curve_apgr_and_tasks(tmp_path: Path) -> None:
    router_util = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])  # picks a, b, b, b
    report = judge(TRAIN, TEST, TRAIN_X, TEST_X, router_util, k=2)
    assert report["router"] == pytest.approx({"reward": 0.75, "cost": (0.1 + 0.02 + 0.01 + 0.01) / 4})
    assert report["best_single"]["worker"] == "a"
    assert report["knn"]["reward"] == pytest.approx(0.75)
    for key in ("router", "best_single", "random", "oracle", "knn", "logreg"):
        assert set(report[key]) >= {"reward", "cost"}
    lams = [p[0] for p in report["curve"]["router"]]
    assert lams[0] == 0.0 and lams == sorted(lams) and len(lams) > 3
    costs = [p[2] for p in report["curve"]["knn"]]
    assert costs[-1] <= costs[0]  # a large λ buys the cheap worker
    assert TEST.cost is not None
    assert report["curve"]["knn"][-1][2] == pytest.approx(TEST.cost[:, 1].mean())
    assert report["apgr"]["all"]["random"] == 0.5 and set(report["apgr"]) == {"all", "x", "y"}
    assert [r["task"] for r in report["per_task"]] == ["x", "y"]
    assert report["per_task"][0]["oracle"] == pytest.approx(0.5)
    text = render_text(report)
    assert "best_single" in text and "overstates" in text and "APGR" in text
    png = tmp_path / "curve.png"
    plot(report, str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_merge_reports_weights_folds_by_size() -> None:
    def rep(n: int, r: float, c: float | None) -> dict[str, object]:
        fig = {"reward": r, "cost": c}
        base = {k: dict(fig) for k in ("router", "random", "oracle", "knn", "logreg")}
        return {"data": "d", "n_test": n, **base, "best_single": {**fig, "worker": "a"}}

    merged = merge_reports([rep(1, 1.0, 0.1), rep(3, 0.0, 0.3)])
    assert merged["router"] == pytest.approx({"reward": 0.25, "cost": 0.25})
    assert merged["n_test"] == 4 and merged["folds"] == 2
    assert merge_reports([rep(1, 1.0, None), rep(1, 0.0, 0.3)])["router"]["cost"] is None
