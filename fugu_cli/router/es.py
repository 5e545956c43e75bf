"""Stage 2: sep-CMA-ES (`cma`, CMA_diagonal=True) over a flat parameter vector, maximising any fitness.

A fitness is any picklable callable `(x, generation) -> float`; all candidates of one generation see the same
`generation` number, so a fitness that samples task batches can give them the same batch (fair comparison).
A generation's candidates are scored through an `Executor` (here, spawned processes, or a Ray cluster).
`OfflineFitness` scores a candidate head by the one objective (normalised reward − λ·USD) of its choices on
recorded outcomes. Never prints: progress goes to `on_generation`.
"""

from __future__ import annotations

import math
import uuid
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
    import cma

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


@dataclass
class OfflineFitness:
    """Mean utility (normalised reward − λ·USD, given as `util`) of a candidate router's choices on a sampled
    batch of recorded prompts, choosing as the checkpoint will at its λ (`checkpoint.Decision`): argmax of
    prior + shrink·(τ·log q centred per prompt − centre) over the workers measured on the prompt (without a
    prior: the raw head).

    The vector is the head's parameters followed by the SVF offsets (`param_vector` order). Without SVF the
    prompt features are fixed (`features`); with SVF they are recomputed from cached inputs of the last
    block(s) (`batches`), and descriptions go through the changed backbone, as at serving time."""

    head_config: dict[str, Any]
    util: np.ndarray  # [N, W] utility at the checkpoint's λ; NaN where a worker was not measured
    tau: float = 0.1
    shrink: float | np.ndarray = 1.0  # [W] or one for all
    prior: np.ndarray | None = None  # [W]
    centre: np.ndarray | None = None  # [W]
    per_generation: int = 64  # prompts per fitness call (all of them when <= 0)
    seed: int = 0
    features: np.ndarray | None = None  # [N, H]
    desc: np.ndarray | None = None  # [W, D] fixed description embeddings (no SVF)
    backbone_spec: str = ""
    svf_targets: tuple[str, ...] = ()
    desc_texts: tuple[str, ...] = ()
    max_tokens: int = 128
    batches: list[Any] | None = None  # [BlockBatch] when SVF is in the vector
    n_blocks: int = 1
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    _state: Any = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_state": None}

    def __call__(self, x: np.ndarray, generation: int) -> float:
        import torch

        head, params, backbone = self._built()
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.as_tensor(x, dtype=torch.float32), params)
            feats, rows = self._features(backbone, generation)
            if backbone is not None:
                desc = backbone.encode(list(self.desc_texts), max_length=self.max_tokens)
            else:
                desc = torch.from_numpy(np.asarray(self.desc, dtype=np.float32))
            logp = torch.log_softmax(head(feats, desc), dim=-1).double().numpy()
        util = self.util[rows]
        est = self.tau * np.where(np.isnan(util), np.nan, logp)
        est = est - np.nanmean(est, axis=1, keepdims=True)
        if self.prior is not None:
            centre = np.zeros(util.shape[1]) if self.centre is None else self.centre
            est = self.prior[None, :] + np.asarray(self.shrink) * (est - centre[None, :])
        choice = np.where(np.isnan(util), -np.inf, est).argmax(axis=1)
        return float(util[np.arange(len(rows)), choice].mean())

    def _features(self, backbone: Any, generation: int) -> tuple[Any, np.ndarray]:
        import torch

        rng = np.random.default_rng(self.seed * 1_000_003 + generation)
        if self.batches is None:
            assert self.features is not None
            n = len(self.features)
            rows = (
                np.arange(n)
                if self.per_generation <= 0
                else rng.choice(n, min(n, self.per_generation), False)
            )
            return torch.from_numpy(np.asarray(self.features[rows], dtype=np.float32)), rows
        from fugu_cli.router.embed_cache import block_features

        per = max(1, len(self.batches[0].rows))
        k = len(self.batches) if self.per_generation <= 0 else max(1, self.per_generation // per)
        pick = rng.choice(len(self.batches), min(k, len(self.batches)), replace=False)
        chosen = [self.batches[i] for i in sorted(pick)]
        feats = torch.cat([block_features(backbone, b, self.n_blocks) for b in chosen])
        return feats, np.concatenate([b.rows for b in chosen])

    def _built(self) -> tuple[Any, list[Any], Any]:
        if self._state is None:
            self._state = self._build()
        built: tuple[Any, list[Any], Any] = self._state
        return built

    def _build(self) -> tuple[Any, list[Any], Any]:
        import torch

        from fugu_cli.router.head import HeadConfig, SelectionHead

        if worker_process():
            torch.set_num_threads(1)  # one core per fitness process
        head = SelectionHead(HeadConfig.from_json(self.head_config)).eval()
        params = list(head.parameters())
        backbone = None
        if self.svf_targets:
            from fugu_cli.router.backbone import load_backbone
            from fugu_cli.router.svf import apply_svf

            backbone = load_backbone(self.backbone_spec)
            params += list(apply_svf(backbone.model, list(self.svf_targets)).parameters())
        return head, params, backbone


def param_vector(params: list[Any]) -> np.ndarray:
    """Flatten torch parameters (head first, then SVF offsets) into the vector ES searches over."""
    import torch

    return np.asarray(torch.nn.utils.parameters_to_vector(params).detach().double().numpy())
