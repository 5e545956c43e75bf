"""sep-CMA-ES (stage 2): it improves known objectives, in one process and in a pool of two."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from fugu_cli.router.es import ESConfig, GenerationStats, popsize_for, run_sep_cma


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
