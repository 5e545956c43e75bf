"""The escalation policy: its supervised start computed by hand, its decisions on the evidence (a passed check
stops, a failed one escalates to a worker that has not tried, a low value stops), the lookahead that makes a
cheap first attempt win where its failure would be caught, and replayed episodes that beat every single
model."""

from __future__ import annotations

import numpy as np
import pytest

from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.escalation import EscalationPolicy, Features, ReplayPolicy, supervised
from fugu_cli.router.replay import ReplayConfig, ReplayEnv, single


def matrix(reward: np.ndarray, cost: np.ndarray) -> RewardMatrix:
    n, w = reward.shape
    return RewardMatrix(
        name="toy",
        prompt_ids=tuple(f"p{i}" for i in range(n)),
        texts=None,
        tasks=("t",) * n,
        splits=("",) * n,
        workers=tuple(f"w{j}" for j in range(w)),
        reward=reward.astype(float),
        cost=cost.astype(float),
    )


def features(
    k: int, allowed: list[bool], *, lam: float = 0.0, passed: bool = False, limit: int = 3
) -> Features:
    w = len(allowed)
    return Features(
        k=k,
        dev=np.zeros((1, w)),
        shrink=np.zeros(w),
        cost=np.array([0.01, 1.0][:w] + [0.5] * max(0, w - 2)),
        lam=lam,
        allowed=np.array([allowed]),
        strongest=np.zeros(1),
        overrun=np.zeros(1),
        last_passed=np.array([passed]),
        last=np.array([0 if k else -1]),
        limit=limit,
    )


def test_the_supervised_start_by_hand() -> None:
    reward = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], dtype=float)
    p = supervised(reward, attempts=3, check_accuracy=0.9)
    assert p.strength.tolist() == [0.5, 0.5] and p.value[0].tolist() == [0.5, 0.5]
    # rows fail an attempt half, half, never and always: weights 0.5, 0.5, 0, 1 (squared for the third)
    assert p.value[1].tolist() == pytest.approx([0.25, 0.25])
    assert p.value[2].tolist() == pytest.approx([0.25 / 1.5, 0.25 / 1.5])
    assert p.stop.tolist() == [0.0, 0.0]  # no margin: stopping is worth what the failed attempt may be
    # a failed check on a worker right half the time was wrong with probability 0.05 / 0.5
    f = features(1, [False, True])
    assert p.bar(f).tolist() == pytest.approx([0.1])
    assert (p.fail, p.spend, p.look) == (0.0, 0.0, 1.0)


def test_the_vector_the_json_and_the_columns_round_trip() -> None:
    p = supervised(np.random.default_rng(0).random((20, 3)))
    x = p.vector()
    assert x.size == 3 * 3 + 3 + 2 + 3
    moved = p.with_vector(x + 0.01)
    assert moved.vector() == pytest.approx(x + 0.01)
    again = EscalationPolicy.from_json(moved.to_json())
    assert again.vector() == pytest.approx(moved.vector(), abs=1e-6)
    cols = p.columns(np.array([2, -1, 0]))  # a pool of the third worker, a new one, the first
    assert cols.value[:, 0].tolist() == p.value[:, 2].tolist()
    assert cols.value[:, 1] == pytest.approx(p.value.mean(axis=1))
    assert cols.strength[2] == p.strength[0]
    with pytest.raises(ValueError, match="entries"):
        p.with_vector(x[:-1])


def test_a_passed_check_stops_and_a_failed_one_escalates_to_a_worker_that_has_not_tried() -> None:
    p = supervised(np.array([[0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 0.0]]))
    assert p.decide(features(1, [False, True], passed=True)).tolist() == [-1]
    assert p.decide(features(1, [False, True])).tolist() == [1]
    assert p.decide(features(2, [False, False])).tolist() == [-1]  # nobody left
    assert p.decide(features(1, [False, True], limit=1)).tolist() == [-1]  # no attempt past the limit
    # escalating is worth it only while its value clears the bar: at λ = 10 the strong worker costs 10
    assert p.decide(features(1, [False, True], lam=10.0)).tolist() == [-1]
    # the first attempt never stops, however dear
    assert p.decide(features(0, [True, True], lam=10.0)).tolist() == [0]


def independent(n: int = 2000, seed: int = 0) -> RewardMatrix:
    rng = np.random.default_rng(seed)
    reward = np.stack([rng.random(n) < 0.5, rng.random(n) < 0.9], axis=1)
    return matrix(reward, np.tile([0.01, 1.0], (n, 1)))


def test_the_lookahead_makes_a_cheap_first_attempt_win_where_its_failure_is_caught() -> None:
    # cheap: right half the time for $0.01; strong: 90 % for $1. At λ = 0.2 the strong one alone is worth
    # 0.9 − 0.2 = 0.7; cheap first, strong if the (perfect) check fails: 0.95 − 0.2·0.51 = 0.85
    data = independent()
    p = supervised(data.reward, check_accuracy=1.0)
    first = features(0, [True, True], lam=0.2)
    assert p.decide(first).tolist() == [0]
    myopic = p.with_vector(np.concatenate([p.vector()[:-1], [0.0]]))  # no lookahead
    assert myopic.decide(first).tolist() == [1]


def test_replayed_escalation_beats_every_single_model_at_its_lambda() -> None:
    data = independent()
    cost = np.array([0.01, 1.0])
    for accuracy in (1.0, 0.9):
        env = ReplayEnv(data, ReplayConfig(check_accuracy=accuracy, max_attempts=3))
        p = supervised(data.reward, check_accuracy=accuracy)
        play = ReplayPolicy(p, np.zeros((data.n, 2)), np.zeros(2), cost, 0.2, 3)
        ep = env.run_batch(play)
        utility = (ep.reward - 0.2 * ep.cost).mean()
        best_single = max(r - 0.2 * c for r, c in (env.evaluate(single(w)) for w in range(2)))
        assert utility > best_single + 0.05
        assert 1.0 < ep.attempts.mean() < 2.0  # the strong worker is called only where the check failed


def test_the_text_moves_a_choice_only_through_its_shrink() -> None:
    p = supervised(np.array([[1.0, 1.0], [0.0, 0.0]]))
    f = features(0, [True, True])
    dev = np.array([[-0.5, 0.5]])  # the text says the second worker suits this prompt
    quiet = Features(**{**f.__dict__, "dev": dev})  # shrink 0: the text is not trusted
    loud = Features(**{**f.__dict__, "dev": dev, "shrink": np.ones(2)})
    assert p.decide(quiet).tolist() == [0] and p.decide(loud).tolist() == [1]
