"""Reward–cost frontiers checked against values computed by hand: the non-decreasing hull, gaps at every
budget, AIQ, CPT and APGR on both axes (cost share and strong-call share)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fugu_cli.router import frontier as fr

# cheap 0.4 @ $1, mid 0.5 @ $4 (under the line from cheap to strong: not on the hull), strong 0.8 @ $5,
# and a dearer, worse one 0.7 @ $9 (after the top: the hull is flat there)
SINGLES = [(1.0, 0.4), (4.0, 0.5), (5.0, 0.8), (9.0, 0.7)]


def test_the_hull_keeps_only_points_no_mix_beats_and_stops_at_the_top() -> None:
    assert fr.upper_hull(SINGLES) == [(1.0, 0.4), (5.0, 0.8)]
    assert fr.upper_hull([(1.0, 0.5), (1.0, 0.7), (2.0, 0.6)]) == [(1.0, 0.7)]  # dearer and worse: gone
    assert fr.upper_hull([(0.0, 0.3)]) == [(0.0, 0.3)]


def test_value_at_interpolates_is_flat_after_the_top_and_nan_below_the_cheapest() -> None:
    hull = fr.upper_hull(SINGLES)
    assert fr.value_at(hull, 3.0) == pytest.approx(0.6)
    assert fr.value_at(hull, 50.0) == pytest.approx(0.8)
    assert np.isnan(fr.value_at(hull, 0.5))
    assert fr.cost_for(hull, 0.7) == pytest.approx(4.0)
    assert fr.cost_for(hull, 0.9) == float("inf")


def test_versus_finds_the_worst_and_best_budget_and_the_cost_saving() -> None:
    ref = fr.upper_hull(SINGLES)
    better = fr.upper_hull([(1.0, 0.4), (2.0, 0.7), (5.0, 0.8)])  # above the line in the middle
    v = fr.versus(better, ref)
    assert v.on_or_above and v.min_gap == pytest.approx(0.0)
    assert v.max_gap == pytest.approx(0.7 - 0.5)  # at $2 the reference has 0.5
    assert v.max_saving == pytest.approx(1 - 2.0 / 4.0)  # 0.7 costs the reference $4
    worse = fr.upper_hull([(1.0, 0.4), (5.0, 0.75)])
    w = fr.versus(worse, ref)
    assert not w.on_or_above and w.min_gap == pytest.approx(-0.05)
    cheap = fr.versus(fr.upper_hull([(0.5, 0.3), (1.0, 0.4), (5.0, 0.8)]), ref)
    assert cheap.max_saving == 0.0  # cheaper but worse than any single model saves nothing at equal reward
    # a method that goes past the best single model saves where its line crosses that model's reward, between
    # its own points: 0.8 at $2.6 on the line from ($1, 0.4) to ($3, 0.9), where the reference pays $5
    beyond = fr.versus(fr.upper_hull([(1.0, 0.4), (3.0, 0.9)]), ref)
    assert beyond.max_saving == pytest.approx(1 - 2.6 / 5.0)
    late = fr.versus(fr.upper_hull([(2.0, 0.7), (5.0, 0.8)]), ref)
    assert late.unreachable == [1.0] and not late.on_or_above  # cannot spend as little as the cheapest model


def test_aiq_is_the_mean_reward_of_the_hull_over_the_budget_range() -> None:
    hull = fr.upper_hull(SINGLES)
    assert fr.aiq(hull, 1.0, 5.0) == pytest.approx(0.6, abs=1e-6)  # a straight line from 0.4 to 0.8
    assert fr.aiq([(0.0, 0.3)], 0.0, 0.0) == pytest.approx(0.3)


def test_cpt_and_apgr_on_the_cost_axis() -> None:
    gap = fr.Gap.of(SINGLES)
    assert gap is not None and gap.weak == (1.0, 0.4) and gap.strong == (5.0, 0.8)
    line = fr.upper_hull(SINGLES)
    assert fr.cpt(line, gap, 0.5) == pytest.approx(0.5)
    assert fr.apgr_cost(line, gap) == pytest.approx(0.5, abs=1e-3)
    bent = fr.upper_hull([(1.0, 0.4), (2.0, 0.7), (5.0, 0.8)])  # PGR 0.75 after a quarter of the span
    assert fr.cpt(bent, gap, 0.5) == pytest.approx(1 / 6)
    assert fr.cpt(bent, gap, 0.8) == pytest.approx(0.25 + 0.75 * (0.05 / 0.25))
    assert fr.apgr_cost(bent, gap) == pytest.approx(0.25 * 0.375 + 0.75 * 0.875, abs=1e-3)
    assert fr.cpt(fr.upper_hull([(1.0, 0.4), (5.0, 0.6)]), gap, 0.8) is None
    assert fr.Gap.of([(1.0, 0.5), (2.0, 0.5)]) is None


def test_apgr_and_cpt_by_strong_calls_by_hand() -> None:
    strong, weak = np.array([1.0, 1, 0, 1]), np.array([0.0, 1, 0, 0])
    # strong-call order 0, 2, 3, 1 recovers 0, .5, .5, 1, 1 of the gap: trapezoid area 0.625
    assert fr.apgr_calls(np.array([0.9, 0.1, 0.5, 0.3]), strong, weak) == pytest.approx(0.625)
    assert fr.apgr_calls(np.array([0.9, 0.1, 0.2, 0.8]), strong, weak) == pytest.approx(0.75)
    assert fr.apgr_calls(np.zeros(2), np.ones(2), np.ones(2)) is None
    assert fr.cpt_calls(np.array([0.9, 0.1, 0.5, 0.3]), strong, weak, 0.5) == pytest.approx(0.25)
    assert fr.cpt_calls(np.array([0.9, 0.1, 0.5, 0.3]), strong, weak, 0.8) == pytest.approx(0.75)


def test_apgr_by_calls_of_a_random_ordering_averages_one_half() -> None:
    strong, weak = np.array([1.0, 1, 0, 1]), np.array([0.0, 1, 0, 0])
    values = [
        fr.apgr_calls(-np.array(p, dtype=float), strong, weak) for p in itertools.permutations(range(4))
    ]
    assert np.mean([v for v in values if v is not None]) == pytest.approx(0.5)
