"""Turning a fitted head into decisions: the per-worker bias and the shrink of `checkpoint.Decision`, chosen
by the one objective on the dev part.

The head's τ·log q estimates each worker's utility up to a constant per prompt, but its average preference
for a worker drifts (target shrinkage, early stopping, the identity terms). The bias recentres it on the
worker's mean utility on the fitting part, so at shrink 0 the router is exactly the best single worker for the
budget and the hull of its λ sweep the best random mix; the shrink (chosen on dev, ties to the smaller) lets
per-prompt evidence move a choice only as far as it earned on prompts the head never fitted. The raw head
(shrink 1, no bias) is measured too and wins only if it beats every calibrated variant. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_SHRINKS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Calibrated:
    shrink: float
    bias: tuple[float, ...]
    dev_utility: float
    options: dict[str, float]  # dev utility of every option measured ("raw", "shrink=0.5", ...)


def mean_utility(util: np.ndarray, score: np.ndarray) -> float:
    """Mean of `util` [N, W] at the argmax of `score` over the measured (non-NaN) cells of each row."""
    if len(util) == 0:
        return 0.0
    masked = np.where(np.isnan(util), -np.inf, score)
    pick = masked.argmax(axis=1)
    return float(util[np.arange(len(util)), pick].mean())


def centred(scores: np.ndarray, util: np.ndarray) -> np.ndarray:
    """Scores minus each row's mean over its measured workers (NaN where unmeasured)."""
    s = np.where(np.isnan(util), np.nan, scores)
    return np.asarray(s - np.nanmean(s, axis=1, keepdims=True))


def calibrate(
    est_fit: np.ndarray,
    util_fit: np.ndarray,
    est_dev: np.ndarray,
    util_dev: np.ndarray,
    shrinks: Sequence[float] = DEFAULT_SHRINKS,
) -> Calibrated:
    """`est_*` [N, W]: the head's τ·log q; `util_*` [N, W]: the utility at the checkpoint's λ (NaN where not
    measured). Returns the dev-best option."""
    mean_u = _col_mean(util_fit)
    mean_g = _col_mean(centred(est_fit, util_fit))
    options: dict[str, tuple[float, float, np.ndarray]] = {}
    for s in shrinks:
        bias = mean_u - s * mean_g
        options[f"shrink={s:g}"] = (mean_utility(util_dev, s * est_dev + bias), s, bias)
    raw = mean_utility(util_dev, est_dev)
    best = max(options.values(), key=lambda o: (o[0], -o[1]))
    dev = {k: v[0] for k, v in options.items()} | {"raw": raw}
    if raw > best[0] + 1e-12:
        return Calibrated(1.0, (), raw, dev)
    return Calibrated(best[1], tuple(float(b) for b in best[2]), best[0], dev)


def _col_mean(a: np.ndarray) -> np.ndarray:
    seen = ~np.isnan(a)
    return np.asarray(np.where(seen, a, 0.0).sum(axis=0) / np.maximum(seen.sum(axis=0), 1))
