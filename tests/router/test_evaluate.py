"""The objective, the baselines and the judge of `fugu router eval`, checked against values computed by hand
on toy matrices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fugu_cli.router.baselines import knn_scores, logreg_scores, single_scores
from fugu_cli.router.calibrate import Calibrated, calibrate, shrink_at
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.evaluate import concat_scores, judge
from fugu_cli.router.objective import (
    Scores,
    best_single,
    choose,
    lambda_grid,
    normalised,
    task_scales,
    utility,
)
from fugu_cli.router.report import plot, render_text


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


def test_each_task_keeps_its_own_reward_scale() -> None:
    m = RewardMatrix(
        "mixed",
        ("a", "b", "c"),
        ("x", "y", "z"),
        ("judge", "exact", "exact"),
        ("",) * 3,
        ("w1", "w2"),
        np.array([[9.0, 7.5], [1.0, 0.0], [0.0, 1.0]]),
        np.array([[0.5, 0.1], [0.5, 0.1], [0.5, 0.1]]),
    )
    assert task_scales(m) == {"judge": 9.0, "exact": 1.0}
    assert normalised(m)[0].tolist() == pytest.approx([1.0, 7.5 / 9])
    assert utility(m, 2.0)[1].tolist() == pytest.approx([1.0 - 1.0, 0.0 - 0.2])


def test_best_single_depends_on_lambda() -> None:
    assert TRAIN.workers[best_single(TRAIN)] == "a"  # 0.75 vs 0.5
    # at λ = 5 per USD: a loses 0.5, b 0.05: 0.25 vs 0.45
    assert TRAIN.workers[best_single(TRAIN, 5.0)] == "b"


def test_scores_move_with_lambda_by_the_expected_cost() -> None:
    s = Scores(np.array([[1.0, 0.9]]), np.array([0.1, 0.01]), lam0=1.0)
    assert s.at(1.0).tolist() == [[1.0, 0.9]]
    assert s.at(3.0)[0].tolist() == pytest.approx([0.8, 0.88])
    assert s.choices(0.0).tolist() == [0] and s.choices(3.0).tolist() == [1]


def test_choose_skips_unmeasured_workers_and_breaks_ties_toward_the_preference() -> None:
    assert choose(np.array([[np.nan, 0.1], [0.5, 0.2]])).tolist() == [1, 0]
    util = np.array([[1.0, 1.0], [0.0, 1.0]])
    assert choose(util, np.array([0.2, 0.7])).tolist() == [1, 1]
    assert choose(util, np.array([0.9, 0.7])).tolist() == [0, 1]


def test_the_lambda_grid_spans_from_cost_barely_mattering_to_cost_deciding() -> None:
    grid = lambda_grid(np.array([0.01, 1.0]), extra=(0.37,))
    assert grid[0] == 0.0 and 0.37 in grid and grid == sorted(grid)
    assert min(g for g in grid if g > 0) <= 1e-3 and max(grid) >= 300
    assert lambda_grid(np.zeros(3)) == [0.0]


def test_knn_averages_reward_and_cost_of_the_nearest_training_prompts() -> None:
    s = knn_scores(TRAIN, TRAIN_X, TEST_X, k=2)
    assert s.base.tolist() == [[1.0, 0.0], [0.5, 1.0], [1.0, 0.5], [1.0, 0.0]]
    assert s.cost.ravel().tolist() == pytest.approx([0.1, 0.01] * 4)
    assert s.choices(0.0).tolist() == [0, 1, 0, 0]
    assert s.choices(100.0).tolist() == [1, 1, 1, 1]


def test_logreg_learns_which_worker_wins_where() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    reward = np.stack([(x[:, 0] > 0), (x[:, 0] <= 0)], axis=1).astype(float)
    train = RewardMatrix("t", tuple(map(str, range(200))), None, ("",) * 200, ("",) * 200, ("a", "b"), reward)
    xt = rng.normal(size=(100, 3))
    s = logreg_scores(train, x, xt)
    assert ((s.base[:, 0] > s.base[:, 1]) == (xt[:, 0] > 0)).mean() > 0.95
    assert s.base.min() >= 0.0 and s.base.max() <= 1.0


def _calibrate(est: np.ndarray, util: np.ndarray, cost: np.ndarray, grid: list[float]) -> Calibrated:
    return calibrate(
        est,
        util,
        cost,
        prior=util.mean(0),
        mean_cost=cost.mean(0),
        lam0=0.0,
        grid=grid,
        shrinks=(0.0, 0.5, 1.0),
    )


def test_calibration_falls_back_to_the_best_mix_when_the_head_is_noise() -> None:
    rng = np.random.default_rng(1)
    util = np.column_stack([rng.random(400) < 0.7, rng.random(400) < 0.4]).astype(float)  # a wins 0.7 : 0.4
    noise = rng.normal(size=(400, 2))  # a head that knows nothing, and prefers b on average
    noise[:, 1] += 0.5
    cal = _calibrate(noise, util, np.zeros_like(util), [0.0])
    assert cal.shrinks == ((0.0, 0.0),) and not cal.raw  # no held-out evidence: the best single
    assert cal.score == pytest.approx(util[:, 0].mean())
    assert cal.options["raw"] < cal.score


def test_calibration_trusts_the_head_only_where_it_earned_it() -> None:
    rng = np.random.default_rng(2)
    topic = rng.integers(0, 2, 400)
    util = np.column_stack([topic == 0, np.ones(400)]).astype(float)  # b always right, a only on topic 0
    cost = np.tile([0.01, 1.0], (400, 1))  # ... but b costs 100 times more
    est = np.column_stack([topic == 0, np.full(400, 0.5)]) + rng.normal(scale=0.1, size=(400, 2))
    cal = _calibrate(est, util, cost, [0.0, 0.3, 100.0])
    # λ = 0: b everywhere is best, the head adds nothing; λ = 0.3: a where it is right, b elsewhere, which
    # only the head knows; λ = 100: a everywhere, whatever the head says
    assert shrink_at(cal.shrinks, 0.0) == 0.0 and shrink_at(cal.shrinks, 0.3) > 0.0
    assert shrink_at(cal.shrinks, 100.0) == 0.0


def test_judge_reports_headline_frontier_groups_and_choices(tmp_path: Path) -> None:
    router = Scores(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]), np.array([0.1, 0.01]))
    methods = {
        "router": router,  # picks a, b, b, b
        "best_single": single_scores(TRAIN, TEST.n),
        "knn": knn_scores(TRAIN, TRAIN_X, TEST_X, k=2),
        "logreg": logreg_scores(TRAIN, TRAIN_X, TEST_X),
    }
    report = judge(TEST, methods, lam=0.0, lambdas=[0.0, 1.0, 100.0])
    assert report["router"] == pytest.approx({"reward": 0.75, "cost": (0.1 + 0.02 + 0.01 + 0.01) / 4})
    assert report["best_single"]["worker"] == "a"
    assert report["random"]["reward"] == pytest.approx(0.5) and report["oracle"]["reward"] == 0.75
    assert report["choices"] == {"p0": "a", "p1": "b", "p2": "b", "p3": "b"}
    front = report["frontier"]
    assert np.ravel(front["singles"]).tolist() == pytest.approx([0.125, 0.5, 0.0125, 0.5])
    assert np.ravel(front["single_hull"]).tolist() == pytest.approx([0.0125, 0.5])  # b: as good, cheaper
    r = front["methods"]["router"]
    assert [p[0] for p in r["points"]] == [0.0, 1.0, 100.0]
    assert r["vs_single_hull"]["on_or_above"] and r["vs_single_hull"]["max_gap"] == pytest.approx(0.25)
    assert front["methods"]["random_mix"]["hull"] == front["methods"]["best_single"]["hull"]
    assert front["methods"]["knn"]["points"][-1][1] == pytest.approx(0.0125)  # λ = 100 buys b everywhere
    assert set(report["groups"]) == {"all", "x", "y"}
    assert report["groups"]["all"]["apgr"]["random"] == 0.5
    assert report["groups"]["x"]["oracle"] == pytest.approx(0.5)
    text = render_text(report)
    assert "best_single" in text and "overstates" in text and "on/above hull" in text
    png = tmp_path / "curve.png"
    plot(report, str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_folds_are_judged_pooled() -> None:
    a = Scores(np.array([[1.0, 0.0]]), np.array([0.1, 0.01]), lam0=0.0)
    b = Scores(np.array([[0.0, 2.0]]), np.array([[0.3, 0.02]]), lam0=10.0)
    both = concat_scores([a, b])
    assert both.base.shape == (2, 2) and both.lam0 == 0.0
    assert both.choices(0.0).tolist() == [0, 0] and both.choices(10.0).tolist() == [0, 1]
    assert both.at(10.0)[1].tolist() == pytest.approx(b.at(10.0)[0].tolist())


def test_the_escalation_report_and_the_plot_of_every_curve(tmp_path: Path) -> None:
    from fugu_cli.router.escalation import supervised
    from fugu_cli.router.escalation_eval import Replay, escalation_report, part_for
    from fugu_cli.router.report import dense

    router = Scores(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]), np.array([0.1, 0.01]))
    methods = {"router": router, "best_single": single_scores(TRAIN, TEST.n)}  # no kNN, no logreg
    report = judge(TEST, methods, lam=0.0, lambdas=[0.0, 1.0, 100.0])
    policy = supervised(normalised(TRAIN), check_accuracy=1.0)
    part = part_for(TEST, policy, np.array([0, 1]), None, (), np.array([0.1, 0.01]), "supervised")
    esc = escalation_report([part], [0.0, 1.0, 100.0], 0.0, Replay(1.0, 3), report["frontier"])
    # a perfect check: at λ = 0 every prompt one of a, b solves is solved (3 of 4), in at most two attempts
    assert esc["at_lambda"]["reward"] == pytest.approx(0.75) and esc["at_lambda"]["attempts"] <= 2
    assert [set(p) for p in esc["frontier"]] == [{"cost", "reward"}] * len(esc["frontier"])
    assert esc["vs_single_hull"]["on_or_above"] and esc["max_attempts"] == 3
    # the single models replayed in the same worlds: on 0/1 outcomes exactly the measured ones
    assert np.ravel(esc["single_hull"]).tolist() == pytest.approx(np.ravel(report["frontier"]["single_hull"]))
    assert esc["vs_measured_single_hull"] == esc["vs_single_hull"]
    report["escalation"] = esc
    report["frontier"]["methods"]["router"]["cpt80"] = 1.4  # as a method below the hull can need
    text = render_text(report)
    assert "escalation: check accuracy 1" in text and "CPT above 100%" in text
    assert "\n  knn " not in text  # no row for a baseline that was not fitted
    png = tmp_path / "curve.png"
    plot(report, str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    # a mix of two points, sampled along a log axis: the reward at each budget is the linear mix
    xs, ys = dense([[0.01, 0.5], [1.0, 0.9]], log=True, per=5)
    assert xs == pytest.approx([0.01, 0.01 * 10**0.5, 0.1, 10**-0.5, 1.0])
    assert ys == pytest.approx([0.5 + 0.4 * (x - 0.01) / 0.99 for x in xs])
