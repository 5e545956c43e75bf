"""Judging a router on held-out prompts: its mean reward and cost against best-single, random, oracle, kNN
and per-worker logistic regression (same embeddings); the cost–quality curve over λ; APGR for two workers;
per-task rows.

Pure numpy on utilities [N, W] (higher is better); never prints (`render_text` returns the text).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fugu_cli.errors import UsageError
from fugu_cli.router.data import RewardMatrix

ORACLE_NOTE = (
    "per-prompt best worker in hindsight: overstates what any router can reach when outcomes are noisy"
)
LAMBDA_STEPS = (0.0, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0)  # × 1/(mean cost); λ: reward per USD


@dataclass(frozen=True)
class Figure:
    reward: float
    cost: float | None

    def to_json(self) -> dict[str, float | None]:
        return {"reward": self.reward, "cost": self.cost}


def mean_costs(data: RewardMatrix) -> np.ndarray:
    """[W] mean cost per worker (zeros when the data set has no cost)."""
    if data.cost is None or data.n == 0:
        return np.zeros(len(data.workers))
    return np.asarray(np.nanmean(data.cost, axis=0))


def choose(util: np.ndarray, tie_break: np.ndarray | None = None) -> np.ndarray:
    """[N] index of the best worker per prompt; exact ties go to the larger `tie_break` (e.g. train mean)."""
    if tie_break is None:
        return np.asarray(util.argmax(axis=1))
    best = util.max(axis=1, keepdims=True)
    masked = np.where(util >= best, tie_break[None, :], -np.inf)
    return np.asarray(masked.argmax(axis=1))


def figure_of(test: RewardMatrix, choices: np.ndarray) -> Figure:
    rows = np.arange(test.n)
    cost = None if test.cost is None else float(test.cost[rows, choices].mean())
    return Figure(float(test.reward[rows, choices].mean()), cost)


def best_single(train: RewardMatrix, lam: float = 0.0) -> int:
    """Index of the worker with the highest mean reward (minus λ × mean cost) on the training part."""
    util = train.reward.mean(axis=0) - lam * mean_costs(train)
    return int(choose(util[None, :], -mean_costs(train))[0])


def random_figure(test: RewardMatrix) -> Figure:
    """Expected reward and cost of a uniform random choice, exactly."""
    cost = None if test.cost is None else float(test.cost.mean())
    return Figure(float(test.reward.mean()), cost)


def oracle_figure(test: RewardMatrix) -> Figure:
    """Per prompt the best reward, at the cheapest cost among the workers that reach it."""
    best = test.reward.max(axis=1, keepdims=True)
    if test.cost is None:
        return Figure(float(best.mean()), None)
    cost = np.where(test.reward >= best, test.cost, np.inf).min(axis=1)
    return Figure(float(best.mean()), float(cost.mean()))


def knn_utilities(
    train_x: np.ndarray, train_r: np.ndarray, test_x: np.ndarray, k: int = 10, chunk: int = 1024
) -> np.ndarray:
    """[Nt, W] mean reward of each worker on the k most cosine-similar training prompts."""
    a = train_x / np.maximum(np.linalg.norm(train_x, axis=1, keepdims=True), 1e-12)
    b = test_x / np.maximum(np.linalg.norm(test_x, axis=1, keepdims=True), 1e-12)
    k = min(k, len(a))
    out = np.zeros((len(b), train_r.shape[1]))
    for s in range(0, len(b), chunk):
        sim = b[s : s + chunk] @ a.T  # [c, Ntr]
        idx = np.argpartition(-sim, k - 1, axis=1)[:, :k]  # [c, k]
        out[s : s + chunk] = train_r[idx].mean(axis=1)
    return out


def logreg_utilities(
    train_x: np.ndarray, train_r: np.ndarray, test_x: np.ndarray, *, l2: float = 1e-3, steps: int = 300
) -> np.ndarray:
    """[Nt, W] predicted reward from one logistic regression per worker (soft targets, Adam, L2)."""
    scale = max(1.0, float(np.abs(train_r).max()))
    y = train_r / scale  # [N, W] in [0, 1]
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
    return scale / (1.0 + np.exp(-(xt @ w)))


def apgr(score: np.ndarray, r_strong: np.ndarray, r_weak: np.ndarray) -> float | None:
    """RouteLLM's APGR: route the prompts with the highest `score` (strong − weak preference) to the strong
    worker, sweep the share of strong calls from 0 to 1, and integrate the performance gap recovered."""
    n = len(score)
    gap = r_strong.mean() - r_weak.mean()
    if n == 0 or abs(gap) < 1e-12:
        return None
    order = np.argsort(-score, kind="stable")
    gain = np.concatenate([[0.0], np.cumsum((r_strong - r_weak)[order])]) / n  # [n+1]
    pgr = gain / gap
    x = np.arange(n + 1) / n
    return float(np.sum((pgr[1:] + pgr[:-1]) * np.diff(x)) / 2)


def strong_share_for(
    score: np.ndarray, r_strong: np.ndarray, r_weak: np.ndarray, fraction: float = 0.95
) -> float | None:
    """Smallest share of prompts sent to the strong worker (highest `score` first) at which the mean reward
    reaches `fraction` of the strong worker's own: RouteLLM's "95 % of GPT-4 quality" cost measure."""
    n = len(score)
    if n == 0:
        return None
    order = np.argsort(-score, kind="stable")
    perf = (r_weak.sum() + np.concatenate([[0.0], np.cumsum((r_strong - r_weak)[order])])) / n  # [n+1]
    hit = np.flatnonzero(perf >= fraction * r_strong.mean() - 1e-12)
    return float(hit[0] / n) if hit.size else None


def lambda_grid(train: RewardMatrix) -> list[float]:
    c = float(mean_costs(train).mean())
    return [0.0] if c <= 0 else [s / c for s in LAMBDA_STEPS]


def curve(util: np.ndarray, train: RewardMatrix, test: RewardMatrix) -> list[list[float | None]]:
    """[(λ, reward, cost)] for choices argmax(util − λ·mean_cost_j) as λ grows."""
    costs = mean_costs(train)
    out: list[list[float | None]] = []
    for lam in lambda_grid(train):
        fig = figure_of(test, choose(util - lam * costs[None, :], train.reward.mean(0)))
        out.append([lam, fig.reward, fig.cost])
    return out


def judge(
    train: RewardMatrix,
    test: RewardMatrix,
    train_x: np.ndarray,
    test_x: np.ndarray,
    router_util: np.ndarray,
    *,
    k: int = 10,
) -> dict[str, Any]:
    """The full report (JSON-ready) of a router's utilities [Nt, W] on `test`."""
    prior = train.reward.mean(0)
    utils = {
        "router": router_util,
        "knn": knn_utilities(train_x, train.reward, test_x, k=k),
        "logreg": logreg_utilities(train_x, train.reward, test_x),
    }
    single = best_single(train)
    report: dict[str, Any] = {
        "data": test.name,
        "n_train": train.n,
        "n_test": test.n,
        "workers": list(test.workers),
    }
    for name, u in utils.items():
        report[name] = figure_of(test, choose(u, prior)).to_json()
    report["best_single"] = {
        **figure_of(test, np.full(test.n, single)).to_json(),
        "worker": train.workers[single],
    }
    report["random"] = random_figure(test).to_json()
    report["oracle"] = {**oracle_figure(test).to_json(), "note": ORACLE_NOTE}
    report["knn"]["k"] = k
    report["curve"] = {name: curve(u, train, test) for name, u in utils.items()}
    report["apgr"] = apgr_report(train, test, utils) if len(test.workers) == 2 else None
    report["per_task"] = per_task_rows(test, {n: choose(u, prior) for n, u in utils.items()}, single)
    return report


def apgr_report(
    train: RewardMatrix, test: RewardMatrix, utils: dict[str, np.ndarray]
) -> dict[str, dict[str, float | None]]:
    """APGR per method, overall and per task, plus the share of strong calls each needs for 95 % of the strong
    worker's reward (`<method>_strong_share_95`); the strong worker is the better one on the training part."""
    strong = int(np.argmax(train.reward.mean(0)))
    weak = 1 - strong
    groups: dict[str, np.ndarray] = {"all": np.arange(test.n)}
    for task in sorted(set(test.tasks) - {""}):
        groups[task] = np.flatnonzero(np.array(test.tasks) == task)
    out: dict[str, dict[str, float | None]] = {}
    for group, idx in groups.items():
        r = test.reward[idx]
        out[group] = {}
        for name, u in utils.items():
            diff = u[idx, strong] - u[idx, weak]
            out[group][name] = apgr(diff, r[:, strong], r[:, weak])
            out[group][f"{name}_strong_share_95"] = strong_share_for(diff, r[:, strong], r[:, weak])
        out[group]["random"] = 0.5
    return out


def per_task_rows(test: RewardMatrix, choices: dict[str, np.ndarray], single: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    tasks = np.array(test.tasks)
    for task in sorted(set(test.tasks)):
        idx = np.flatnonzero(tasks == task)
        sub = test.subset(idx)
        row: dict[str, Any] = {"task": task or "(all)", "n": len(idx)}
        for name, ch in choices.items():
            row[name] = figure_of(sub, ch[idx]).reward
        row["best_single"] = figure_of(sub, np.full(len(idx), single)).reward
        row["random"] = random_figure(sub).reward
        row["oracle"] = oracle_figure(sub).reward
        rows.append(row)
    return rows


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pool k-fold reports: figures weighted by each fold's test size."""
    sizes = np.array([r["n_test"] for r in reports], dtype=float)
    w = sizes / sizes.sum()
    out: dict[str, Any] = {"data": reports[0]["data"], "folds": len(reports), "n_test": int(sizes.sum())}
    for key in ("router", "best_single", "random", "oracle", "knn", "logreg"):
        costs = [r[key]["cost"] for r in reports]
        out[key] = {
            "reward": float(sum(wi * r[key]["reward"] for wi, r in zip(w, reports, strict=True))),
            "cost": None if None in costs else float(sum(wi * c for wi, c in zip(w, costs, strict=True))),
        }
    out["best_single"]["worker"] = sorted({r["best_single"]["worker"] for r in reports})
    out["curve"] = _merge_curves(reports, w)
    out["oracle"]["note"] = ORACLE_NOTE
    return out


def _merge_curves(reports: Sequence[dict[str, Any]], w: np.ndarray) -> dict[str, list[list[float | None]]]:
    """Pool cost–quality curves point by point: λ steps are the same multiples of each fold's mean cost."""
    out: dict[str, list[list[float | None]]] = {}
    for name in reports[0].get("curve", {}):
        curves = [r["curve"][name] for r in reports]
        if len({len(c) for c in curves}) != 1:
            continue
        pts: list[list[float | None]] = []
        for i, step in enumerate(LAMBDA_STEPS[: len(curves[0])]):
            reward = float(sum(wi * c[i][1] for wi, c in zip(w, curves, strict=True)))
            costs = [c[i][2] for c in curves]
            cost = None if None in costs else float(sum(wi * c for wi, c in zip(w, costs, strict=True)))
            pts.append([step, reward, cost])
        out[name] = pts
    return out


def render_text(report: dict[str, Any]) -> str:
    """The human table `fugu router eval` prints."""
    lines = [
        f"{report['data']}: {report.get('n_test')} held-out prompts (trained on {report.get('n_train', '?')})"
    ]
    lines.append(f"  {'method':<12} {'reward':>8} {'cost/prompt':>12}")
    for key in ("router", "best_single", "knn", "logreg", "random", "oracle"):
        fig = report[key]
        cost = "-" if fig["cost"] is None else f"${fig['cost']:.5f}"
        extra = f"  ({fig['worker']})" if key == "best_single" else ""
        extra += "  (overstates what is reachable)" if key == "oracle" else ""
        lines.append(f"  {key:<12} {fig['reward']:>8.4f} {cost:>12}{extra}")
    if report.get("apgr"):
        lines.append(
            "  APGR (random = 0.5); @95%: share of strong calls for 95% of the strong worker's reward"
        )
        for group, vals in report["apgr"].items():
            parts = " ".join(
                f"{k.replace('_strong_share_95', '@95%')}={'-' if v is None else f'{v:.3f}'}"
                for k, v in vals.items()
            )
            lines.append(f"    {group:<14} {parts}")
    if report.get("curve") and len(report["curve"]["router"]) > 1:
        lines.append("  cost-quality (router): λ reward cost")
        lines += [
            f"    {lam:<10.4g} {r:.4f} {c if c is None else f'${c:.5f}'}"
            for lam, r, c in report["curve"]["router"]
        ]
    if report.get("per_task"):
        lines.append(
            f"  {'task':<22} {'n':>5} {'router':>7} {'single':>7} {'knn':>7} {'logreg':>7} {'oracle':>7}"
        )
        for row in report["per_task"]:
            lines.append(
                f"  {row['task'][:22]:<22} {row['n']:>5} {row['router']:>7.3f} {row['best_single']:>7.3f} "
                f"{row['knn']:>7.3f} {row['logreg']:>7.3f} {row['oracle']:>7.3f}"
            )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Cost–quality curves (router, kNN, logreg) plus the single points, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    has_cost = report["router"]["cost"] is not None
    for name, pts in report["curve"].items():
        xs = [p[2] if has_cost else p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], marker="o", label=name)
    for key in ("best_single", "random", "oracle"):
        f = report[key]
        ax.scatter([f["cost"] if has_cost else 0.0], [f["reward"]], label=key, marker="x")
    ax.set_xlabel("mean cost per prompt (USD)" if has_cost else "λ")
    ax.set_ylabel("mean reward")
    ax.set_title(str(report["data"]))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@dataclass(frozen=True)
class EvalOptions:
    """What `fugu router eval` passes in."""

    data: Path
    router: Path
    split: str | None = None  # None: the split the checkpoint was trained with
    k: int = 10
    plot: Path | None = None
    cache_dir: Path | None = None
    threads: int | None = None
    store: bool = False


def eval_command(opts: EvalOptions) -> dict[str, Any]:
    """The report of `fugu router eval` (what `--json` prints)."""
    from fugu_cli.router.backbone import load_backbone
    from fugu_cli.router.checkpoint import read_meta
    from fugu_cli.router.data import SplitSpec, load_dataset, load_store_outcomes, split_matrix
    from fugu_cli.router.embed_cache import encode_prompts
    from fugu_cli.router.trainer import default_split, router_utilities

    meta = read_meta(opts.router)
    full = (load_store_outcomes(opts.data) if opts.store else load_dataset(opts.data)).complete()
    full = full.renamed(dict(meta.training.get("names") or {}))
    split_text = opts.split or str(meta.training.get("split") or default_split(full))
    spec = SplitSpec.parse(split_text)
    if spec.kind == "all":
        raise UsageError(
            "eval needs a held-out part: pass --split given:test, kfold:K:SEED:FOLD or tasks:NAME"
        )
    parts = split_matrix(full, spec)
    train, test = parts.train, parts.test
    if test.n == 0 or train.n == 0 or train.texts is None or test.texts is None:
        raise UsageError(
            f"{full.name}: split {spec} leaves {train.n} training and {test.n} held-out prompts with text."
        )
    backbone = load_backbone(meta.backbone, threads=opts.threads)
    train_x = encode_prompts(backbone, train.texts, max_tokens=meta.max_tokens, cache_dir=opts.cache_dir)
    test_x = encode_prompts(backbone, test.texts, max_tokens=meta.max_tokens, cache_dir=opts.cache_dir)
    util = router_utilities(opts.router, test, cache_dir=opts.cache_dir, threads=opts.threads)
    report = judge(train, test, train_x, test_x, util, k=opts.k)
    report.update(
        split=str(spec), router_checkpoint=str(opts.router), dropped_duplicates=parts.dropped_duplicates
    )
    if opts.plot is not None:
        plot(report, str(opts.plot))
    return report
