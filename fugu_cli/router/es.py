"""Stage 2: sep-CMA-ES (`cma`, CMA_diagonal=True) over a flat parameter vector, maximising any fitness.

A fitness is any picklable callable `(x, generation) -> float`; all candidates of one generation see the same
`generation` number, so a fitness that samples task batches can give them the same batch (fair comparison).
A generation's candidates are scored through an `Executor` (here, spawned processes, or a Ray cluster). The
router's stage 2 (`trainer.py`) searches the escalation policy with it. Never prints: progress goes to
`on_generation`.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fugu_cli.router.executor import Executor, chunked, make_executor, worker_process


class Fitness(Protocol):
    def __call__(self, x: np.ndarray, generation: int) -> float:
        """Higher is better. Must be deterministic given (x, generation)."""
        ...


@dataclass(frozen=True)
class ESConfig:
    generations: int = 60
    sigma0: float = 0.03
    popsize: int | None = None  # default 4 + 3 ln N
    seed: int = 0
    processes: int = 2  # 1 = evaluate in this process


@dataclass(frozen=True)
class GenerationStats:
    generation: int
    best: float  # best fitness in this generation
    mean: float  # mean fitness of this generation
    incumbent: float  # the best vector so far, scored on this generation's batch
    sigma: float


@dataclass(frozen=True)
class ESResult:
    x: np.ndarray  # the best candidate seen (or x0 when none beat it)
    fitness: float
    x0_fitness: float
    history: list[GenerationStats] = field(default_factory=list)


def popsize_for(n: int) -> int:
    return 4 + int(3 * math.log(max(n, 1)))


@dataclass(frozen=True)
class _Chunk:
    """Scores a chunk of (candidate, generation) pairs; a fitness with a `token` is kept per process, so
    whatever it builds on first use (a head, a backbone) survives between generations."""

    fitness: Fitness

    @property
    def token(self) -> str | None:
        return getattr(self.fitness, "token", None)

    def __call__(self, items: list[tuple[np.ndarray, int]]) -> list[float]:
        token = getattr(self.fitness, "token", None)
        # in the caller's own process its object already keeps its state
        fit = _BUILT.setdefault(token, self.fitness) if token and worker_process() else self.fitness
        return [float(fit(x, gen)) for x, gen in items]


_BUILT: dict[str, Fitness] = {}


def run_sep_cma(
    fitness: Fitness,
    x0: np.ndarray,
    config: ESConfig = ESConfig(),
    on_generation: Callable[[GenerationStats], None] | None = None,
    executor: Executor | None = None,
) -> ESResult:
    """Maximise `fitness` from `x0`. Each generation the incumbent (x0 at first) is scored on the same batch
    as the candidates and replaced only by one that beats it there, so batch luck does not pick the result.
    Without an `executor`, `config.processes` spawned processes (or this one) score the candidates."""
    cma = _import_cma()
    x0 = np.asarray(x0, dtype=np.float64)
    opts: dict[str, Any] = {
        "CMA_diagonal": True,
        "popsize": config.popsize or popsize_for(x0.size),
        "seed": config.seed + 1,  # cma treats seed 0 as "random"
        "verbose": -9,
        "maxiter": config.generations,
    }
    es = cma.CMAEvolutionStrategy(x0, config.sigma0, opts)
    own = executor is None
    runner = executor or make_executor(config.processes)
    width = max(1, runner.width)
    best_x, best_f, x0_f = x0.copy(), -math.inf, -math.inf
    history: list[GenerationStats] = []
    try:
        for gen in range(config.generations):
            cands = [np.asarray(c) for c in es.ask()]
            pairs = [(x, gen) for x in [x0, best_x, *cands]]
            scores = [f for part in runner.map(_Chunk(fitness), chunked(pairs, width)) for f in part]
            anchor, held, fits = scores[0], scores[1], scores[2:]
            es.tell(cands, [-f for f in fits])
            if gen == 0:
                x0_f, best_f = anchor, anchor
            top = int(np.argmax(fits))
            # compare on this generation's batch: the incumbent is re-scored alongside the candidates
            if fits[top] > held:
                best_x, best_f = cands[top].copy(), fits[top]
            else:
                best_f = held
            stats = GenerationStats(
                gen, float(max(fits)), float(np.mean(fits)), float(best_f), float(es.sigma)
            )
            history.append(stats)
            if on_generation is not None:
                on_generation(stats)
    finally:
        if own:
            runner.close()
    return ESResult(best_x, float(best_f), float(x0_f), history)


def _import_cma() -> Any:
    """`cma`, without the matplotlib.pyplot its `cma.s` shortcuts import for plotting (about a second of a
    2-core machine's CPU in every stage 2; its plots are never drawn here). Where pyplot is already loaded it
    is left alone; else it is hidden for the import only, so a later `import matplotlib.pyplot` works."""
    if "cma" in sys.modules or "matplotlib.pyplot" in sys.modules:
        import cma

        return cma
    sys.modules["matplotlib.pyplot"] = None  # type: ignore[assignment]  # makes its import fail
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # cma warns that its plots are unavailable
            import cma
    finally:
        del sys.modules["matplotlib.pyplot"]
    return cma
