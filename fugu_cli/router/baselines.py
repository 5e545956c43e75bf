"""Baseline routers fitted on a training part, as `Scores` the judge treats exactly like the learned router's:
best single for the budget, kNN (k most similar training prompts: their mean reward and mean cost), and one
logistic regression per worker, all on the same embeddings and the same normalised rewards.

Pure numpy; never prints.
"""

from __future__ import annotations

import numpy as np

from fugu_cli.router.data import RewardMatrix, mean_costs
from fugu_cli.router.objective import Scores, normalised


def single_scores(train: RewardMatrix, n: int) -> Scores:
    """Every prompt gets the training means: at each λ this picks the best single worker for the budget,
    and the hull of its λ sweep is the best random mix of two of them (chosen on training data)."""
    prior = np.nanmean(normalised(train), axis=0)  # [W]
    return Scores(np.tile(prior, (n, 1)), mean_costs(train), 0.0, prior)


def knn_scores(
    train: RewardMatrix,
    train_x: np.ndarray,
    test_x: np.ndarray,
    k: int = 10,
    chunk: int = 1024,
) -> Scores:
    """[Nt, W] mean normalised reward and mean USD cost of each worker on the k most cosine-similar training
    prompts: a cost-aware kNN."""
    reward = normalised(train)
    cost = train.costs()
    a = _unit(train_x)
    b = _unit(test_x)
    k = min(k, len(a))
    r_out = np.zeros((len(b), reward.shape[1]))
    c_out = np.zeros_like(r_out)
    for s in range(0, len(b), chunk):
        sim = b[s : s + chunk] @ a.T  # [c, Ntr]
        idx = np.argpartition(-sim, k - 1, axis=1)[:, :k]  # [c, k]
        r_out[s : s + chunk] = reward[idx].mean(axis=1)
        c_out[s : s + chunk] = cost[idx].mean(axis=1)
    return Scores(r_out, c_out, 0.0, np.nanmean(reward, axis=0))


def _unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12))


def logreg_scores(
    train: RewardMatrix,
    train_x: np.ndarray,
    test_x: np.ndarray,
    *,
    l2: float = 1e-3,
    steps: int = 300,
) -> Scores:
    """One logistic regression per worker (soft targets: normalised rewards clipped to [0, 1]; Adam, L2)
    predicting reward; the cost each worker is expected to spend is its training mean."""
    y = np.clip(normalised(train), 0.0, 1.0)  # [N, W]
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    x = np.hstack([(train_x - mu) / sd, np.ones((len(train_x), 1))])  # [N, H+1]
    w = np.zeros((x.shape[1], y.shape[1]))
    m, v = np.zeros_like(w), np.zeros_like(w)
    for t in range(1, steps + 1):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) / len(x) + l2 * np.vstack([w[:-1], np.zeros((1, w.shape[1]))])
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        w -= 0.05 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    xt = np.hstack([(test_x - mu) / sd, np.ones((len(test_x), 1))])
    pred = 1.0 / (1.0 + np.exp(-(xt @ w)))
    return Scores(pred, mean_costs(train), 0.0, y.mean(axis=0))
