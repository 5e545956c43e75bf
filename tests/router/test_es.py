"""sep-CMA-ES (stage 2): it improves known objectives, in one process and in a pool of two."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fugu_cli.router.es import ESConfig, GenerationStats, OfflineFitness, popsize_for, run_sep_cma


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Tiny tensors: torch's thread pool only adds contention on a shared machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Quadratic:
    """Fitness −Σ wᵢ(xᵢ − tᵢ)²: best at `target`, badly scaled on purpose (diagonal CMA handles it)."""

    def __init__(self, target: np.ndarray) -> None:
        self.target = target
        self.weights = np.linspace(1.0, 20.0, target.size)

    def __call__(self, x: np.ndarray, generation: int) -> float:
        return -float(np.sum(self.weights * (x - self.target) ** 2))


def test_sep_cma_improves_a_known_objective() -> None:
    target = np.linspace(-0.3, 0.3, 12)
    seen: list[GenerationStats] = []
    result = run_sep_cma(
        Quadratic(target), np.zeros(12), ESConfig(generations=60, sigma0=0.1, processes=1), seen.append
    )
    assert [s.generation for s in seen] == list(range(60))
    assert result.x0_fitness == pytest.approx(Quadratic(target)(np.zeros(12), 0))
    assert result.fitness > 0.05 * result.x0_fitness  # at least 20x closer than the start (fitness <= 0)
    assert np.abs(result.x - target).max() < 0.1
    best = [s.incumbent for s in seen]
    assert best == sorted(best)  # a deterministic objective: the incumbent never gets worse
    assert seen[-1].mean > seen[0].mean


def test_parallel_evaluation_gives_the_same_search() -> None:
    target = np.full(6, 0.2)
    cfg = ESConfig(generations=6, sigma0=0.05, seed=3)
    one = run_sep_cma(Quadratic(target), np.zeros(6), cfg)
    two = run_sep_cma(
        Quadratic(target), np.zeros(6), ESConfig(generations=6, sigma0=0.05, seed=3, processes=1)
    )
    assert np.allclose(one.x, two.x) and one.fitness == pytest.approx(two.fitness)


def test_popsize_follows_4_plus_3_ln_n() -> None:
    assert popsize_for(1) == 4 and popsize_for(10_000) == 4 + int(3 * np.log(10_000))


def _two_topic_features(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    topic = rng.integers(0, 2, n)
    x = rng.normal(scale=0.3, size=(n, 8))
    x[:, 0] += np.where(topic == 0, 1.0, -1.0)
    reward = np.stack([topic == 0, topic == 1], axis=1).astype(float)  # worker 0 wins topic 0
    return x.astype(np.float32), reward


def test_offline_fitness_is_what_es_climbs_on_a_head() -> None:
    import torch

    from fugu_cli.router.es import param_vector
    from fugu_cli.router.head import HeadConfig, SelectionHead

    x, reward = _two_topic_features(256, 0)
    torch.manual_seed(0)
    head = SelectionHead(HeadConfig(8, 8, rank=2, n_known=2, sim_init=0.0))
    with torch.no_grad():
        head.A.zero_()  # every prompt gets the same scores: one worker for all, half right
    desc = np.eye(2, 8, dtype=np.float32)
    fitness = OfflineFitness(
        head_config=head.config.to_json(),
        util=reward,
        tau=0.1,
        per_generation=64,
        features=x,
        desc=desc,
    )
    x0 = param_vector(list(head.parameters()))
    assert fitness(x0, 0) == fitness(x0, 0)  # same generation, same batch
    full = OfflineFitness(**{**fitness.__dict__, "per_generation": 0, "_state": None, "token": "full"})
    result = run_sep_cma(fitness, x0, ESConfig(generations=25, sigma0=0.3, seed=1, processes=1))
    assert full(x0, 0) == pytest.approx(0.5, abs=0.1)
    assert full(result.x, 0) > 0.9


def test_the_fitness_skips_unmeasured_workers_and_scores_the_utility() -> None:
    import torch

    from fugu_cli.router.es import param_vector
    from fugu_cli.router.head import HeadConfig, SelectionHead

    x, reward = _two_topic_features(64, 1)
    torch.manual_seed(0)
    head = SelectionHead(HeadConfig(8, 8, rank=2, n_known=2, sim_init=0.0))
    with torch.no_grad():
        head.A.zero_()
        head.known_bias.copy_(torch.tensor([5.0, 0.0]))  # always worker 0, where it was measured
    util = reward - 0.25  # λ·cost of 0.25 on every choice
    util[::2, 0] = np.nan  # worker 0 unmeasured on every other prompt: worker 1 is chosen there
    fit = OfflineFitness(
        head.config.to_json(), util, per_generation=0, features=x, desc=np.eye(2, 8, dtype=np.float32)
    )
    expected = np.where(np.isnan(util[:, 0]), util[:, 1], util[:, 0]).mean()
    assert fit(param_vector(list(head.parameters())), 0) == pytest.approx(expected)
