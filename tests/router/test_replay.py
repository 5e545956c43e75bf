"""The replay environment's rules: measured outcomes replay exactly, checks err at the stated rate, budgets
and attempt limits stop episodes, and one seed is one world for every policy."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.replay import (
    Batch,
    BatchPolicy,
    Observed,
    Policy,
    ReplayConfig,
    ReplayEnv,
    State,
    cascade,
    single,
)


def matrix(reward: np.ndarray, cost: np.ndarray | None = None) -> RewardMatrix:
    n, w = reward.shape
    return RewardMatrix(
        name="toy",
        prompt_ids=tuple(f"p{i}" for i in range(n)),
        texts=None,
        tasks=("t",) * n,
        splits=("",) * n,
        workers=tuple(f"w{j}" for j in range(w)),
        reward=reward.astype(float),
        cost=None if cost is None else cost.astype(float),
    )


def binary(n: int = 400, seed: int = 1) -> RewardMatrix:
    rng = np.random.default_rng(seed)
    cheap = rng.random(n) < 0.4
    strong = rng.random(n) < 0.7
    cost = np.tile([0.01, 0.10], (n, 1))
    return matrix(np.stack([cheap, strong], axis=1).astype(float), cost)


def test_a_single_worker_replays_its_measured_outcomes_and_costs_exactly() -> None:
    data = binary()
    env = ReplayEnv(data, ReplayConfig(check_accuracy=0.5))
    for w in range(2):
        reward, cost = env.evaluate(single(w))
        assert reward == pytest.approx(data.reward[:, w].mean())
        assert cost == pytest.approx(data.cost[:, w].mean())  # type: ignore[index]


def test_with_a_perfect_check_a_cascade_solves_what_any_of_its_workers_solves() -> None:
    data = binary()
    env = ReplayEnv(data, ReplayConfig(check_accuracy=1.0))
    reward, cost = env.evaluate(cascade([0, 1]))
    r = data.reward
    assert reward == pytest.approx(np.maximum(r[:, 0], r[:, 1]).mean())
    # the strong worker is paid for exactly where the cheap one failed
    assert cost == pytest.approx(0.01 + 0.10 * (1 - r[:, 0]).mean())


def test_the_check_errs_at_the_stated_rate_independently_per_attempt() -> None:
    data = binary(n=4000)
    env = ReplayEnv(data, ReplayConfig(check_accuracy=0.9, seed=3))
    wrong = [env.outcome(t, w, 0)[0] != env.outcome(t, w, 0)[1] for t in range(data.n) for w in range(2)]
    rate = float(np.mean(wrong))
    assert abs(rate - 0.1) < 4 * np.sqrt(0.1 * 0.9 / len(wrong))
    # an erring check lets the cascade keep a wrong cheap attempt or pay for the strong one needlessly
    perfect = ReplayEnv(data, ReplayConfig(check_accuracy=1.0, seed=3)).evaluate(cascade([0, 1]))
    noisy = env.evaluate(cascade([0, 1]))
    assert noisy[0] < perfect[0]


def test_soft_rewards_are_seeded_draws_and_one_seed_is_one_world() -> None:
    data = matrix(np.full((3000, 1), 0.3))
    a = ReplayEnv(data, ReplayConfig(seed=5))
    b = ReplayEnv(data, ReplayConfig(seed=5))
    c = ReplayEnv(data, ReplayConfig(seed=6))
    runs = [[env.run(single(0), t).reward for t in range(data.n)] for env in (a, b, c)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert abs(np.mean(runs[0]) - 0.3) < 4 * np.sqrt(0.3 * 0.7 / data.n)


def test_the_budget_and_the_attempt_limit_stop_an_episode() -> None:
    data = matrix(np.zeros((1, 3)), np.array([[0.5, 0.5, 0.5]]))
    always = cascade([0, 1, 2])
    sure = ReplayConfig(check_accuracy=1.0)
    assert len(ReplayEnv(data, replace(sure, budget_usd=0.9)).run(always, 0).workers) == 2
    assert len(ReplayEnv(data, replace(sure, max_attempts=1)).run(always, 0).workers) == 1
    assert ReplayEnv(data, sure).run(always, 0).cost == pytest.approx(1.5)


def test_a_policy_sees_workers_costs_and_verdicts_but_never_the_truth() -> None:
    data = matrix(np.array([[0.0, 1.0]]), np.array([[0.01, 0.2]]))
    seen: list[State] = []

    def policy(state: State) -> int | None:
        seen.append(state)
        return None if state.last_passed else len(state.attempts)

    episode = ReplayEnv(data, ReplayConfig(check_accuracy=1.0)).run(policy, 0)
    assert episode.workers == (0, 1) and episode.reward == 1.0
    assert [len(s.attempts) for s in seen] == [0, 1, 2]
    first = seen[1].attempts[0]
    assert (first.worker, first.passed, first.cost) == (0, False, 0.01)
    assert not hasattr(first, "success")


def test_unmeasured_cells_are_refused() -> None:
    with pytest.raises(ValueError, match="unmeasured"):
        ReplayEnv(matrix(np.array([[np.nan, 1.0]])))


def batch_of(policy: Policy) -> BatchPolicy:
    """A per-state policy played in lockstep (the batch form's rules must give the same episodes)."""

    def play(batch: Batch) -> np.ndarray:
        out = np.full(len(batch.tasks), -1)
        for i, t in enumerate(batch.tasks):
            if not batch.active[i]:
                continue
            seen = tuple(
                Observed(int(w), 0.0, bool(p)) for w, p in zip(batch.workers[i], batch.passed[i], strict=True)
            )
            choice = policy(State(int(t), seen, float(batch.spent[i])))
            out[i] = -1 if choice is None else choice
        return out

    return play


@pytest.mark.parametrize("config", [ReplayConfig(0.8, 3, None, 2), ReplayConfig(0.9, 3, 0.05, 4)])
def test_batch_episodes_are_the_episodes_run_plays(config: ReplayConfig) -> None:
    rng = np.random.default_rng(7)
    data = matrix(rng.random((300, 3)).round(1), np.tile([0.01, 0.03, 0.1], (300, 1)))
    env = ReplayEnv(data, config)
    for policy in (cascade([0, 1, 2]), cascade([2, 0]), single(1)):
        batch = env.run_batch(batch_of(policy))
        for t in range(data.n):
            one = env.run(policy, t)
            made = batch.workers[t][batch.workers[t] >= 0]
            assert tuple(made) == one.workers and tuple(batch.checks[t][: len(made)]) == one.checks
            assert batch.reward[t] == one.reward and batch.cost[t] == pytest.approx(one.cost)
        assert env.evaluate(policy) == pytest.approx((batch.reward.mean(), batch.cost.mean()))


def test_a_batch_plays_only_the_tasks_asked_for() -> None:
    data = binary(n=50)
    env = ReplayEnv(data, ReplayConfig(check_accuracy=1.0))
    some = env.run_batch(batch_of(cascade([0, 1])), [3, 7, 3])
    assert some.tasks.tolist() == [3, 7, 3] and some.reward[0] == some.reward[2]
    assert some.attempts.tolist() == [env.run(cascade([0, 1]), t).workers.__len__() for t in (3, 7, 3)]
