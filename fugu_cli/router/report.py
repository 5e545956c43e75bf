"""Rendering a `fugu router eval` report: the text table and the reward–cost plot (router, kNN, logreg and
random-mix curves against the single models' hull). Returns text or writes a PNG; never prints.
"""

from __future__ import annotations

import itertools
from typing import Any

METHODS = ("router", "best_single", "knn", "logreg", "random", "oracle")
CURVES = ("router", "knn", "logreg", "random_mix")


def render_text(report: dict[str, Any]) -> str:
    """The human table `fugu router eval` prints."""
    lam = report.get("lambda", 0.0)
    lines = [
        f"{report['data']}: {report['n_test']} prompts judged ({report.get('split', '?')}); "
        f"router λ = {lam:g} reward per USD; rewards normalised per task; cost: {report.get('cost_source')}",
        f"  {'method':<12} {'reward':>8} {'cost/prompt':>12}   (at the router's λ)",
    ]
    for key in METHODS:
        fig = report.get(key)
        if fig is None:
            continue
        cost = "-" if fig["cost"] is None else f"${fig['cost']:.5f}"
        extra = f"  ({fig['worker']})" if key == "best_single" and "worker" in fig else ""
        extra += "  (overstates what is reachable)" if key == "oracle" else ""
        lines.append(f"  {key:<12} {fig['reward']:>8.4f} {cost:>12}{extra}")
    if report.get("baselines_skipped"):
        lines.append(f"  note: {report['baselines_skipped']}")
    lines += _frontier_lines(report["frontier"])
    if "escalation" in report:
        lines += _escalation_lines(report["escalation"])
    lines += _group_lines(report.get("groups", {}))
    return "\n".join(lines)


def _frontier_lines(front: dict[str, Any]) -> list[str]:
    out = [
        f"  frontier: single models' hull AIQ {front['single_aiq']:.4f}; each method's hull (mixing λs)",
        f"    {'method':<11} {'AIQ':>7} {'min gap':>8} {'max gap':>8} {'saving':>7} {'CPT50':>6} "
        f"{'CPT80':>6} {'APGR':>6}  on/above hull",
    ]
    over = False
    for name in ("router", "knn", "logreg", "random_mix", "best_single"):
        m = front["methods"].get(name)
        if m is None:
            continue
        v = m["vs_single_hull"]
        over |= any((m[c] or 0.0) > 1.0 for c in ("cpt50", "cpt80"))
        out.append(
            f"    {name:<11} {m['aiq']:>7.4f} {_num(v['min_gap'], '+.4f'):>8} "
            f"{_num(v['max_gap'], '+.4f'):>8} "
            f"{v['max_saving']:>7.1%} {_num(m['cpt50'], '.1%'):>6} {_num(m['cpt80'], '.1%'):>6} "
            f"{_num(m['apgr'], '.3f'):>6}  {'yes' if v['on_or_above'] else 'NO'}"
        )
    if over:
        out.append(f"    {CPT_NOTE}")
    pts = front["methods"]["router"]["points"]
    if len(pts) > 1:
        out.append("  router λ sweep (λ reward/USD: cost, reward)")
        out += [f"    {lam:<10.4g} ${c:.5f}  {r:.4f}" for lam, c, r in pts]
    return out


CPT_NOTE = (
    "CPT above 100%: the method reaches that share of the cheapest-to-best reward gap only past the best "
    "single model's cost, i.e. it does worse there than calling the best model alone"
)


def _escalation_lines(esc: dict[str, Any]) -> list[str]:
    at, v, o = esc["at_lambda"], esc["vs_single_hull"], esc["vs_one_shot"]
    cost = "-" if at["cost"] is None else f"${at['cost']:.5f}"
    return [
        f"  escalation: check accuracy {esc['verifier_accuracy']:g} (policy assumes "
        f"{esc['assumed_accuracy']:g}), up to {esc['max_attempts']} attempts, {esc['worlds']} replayed "
        f"worlds, policy: {esc['policy']}",
        f"    at λ = {at['lambda']:g}: reward {at['reward']:.4f}, cost {cost}, {at['attempts']:.2f} attempts",
        f"    vs single models' hull (replayed in the same worlds): min gap {_num(v['min_gap'], '+.4f')}, "
        f"max gap {_num(v['max_gap'], '+.4f')}, saving {v['max_saving']:.1%}, on/above "
        f"{'yes' if v['on_or_above'] else 'NO'}; vs one-shot router: max gap {_num(o['max_gap'], '+.4f')}, "
        f"saving {o['max_saving']:.1%}",
        "    frontier (cost, reward): "
        + " ".join(f"(${p['cost']:.5f}, {p['reward']:.4f})" for p in esc["frontier"]),
    ]


def _group_lines(groups: dict[str, Any]) -> list[str]:
    if not groups:
        return []
    out = [
        f"  {'task':<22} {'n':>6} {'router':>7} {'single':>7} {'knn':>7} {'logreg':>7} {'oracle':>7} "
        f"{'APGR router/knn/logreg':>24}"
    ]
    for task, g in groups.items():
        apgr = "/".join(_num(g["apgr"].get(m), ".3f") for m in ("router", "knn", "logreg"))
        out.append(
            f"  {task[:22]:<22} {g['n']:>6} {g['router']:>7.3f} {g['best_single']:>7.3f} "
            f"{_num(g.get('knn'), '.3f'):>7} {_num(g.get('logreg'), '.3f'):>7} {g['oracle']:>7.3f} {apgr:>24}"
        )
    return out


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None or v != v else format(v, fmt)


def dense(
    hull: list[list[float]] | list[tuple[float, float]], log: bool, per: int = 40
) -> tuple[list[float], ...]:
    """The hull as the reward reachable at each budget, sampled along each segment (log-spaced on a log
    axis), so a mix of two points is drawn as it is: straight in linear cost, bent on a log axis."""
    import numpy as np

    xs: list[float] = [float(hull[0][0])]
    ys: list[float] = [float(hull[0][1])]
    for (c0, r0), (c1, r1) in itertools.pairwise(hull):
        grid = np.geomspace(c0, c1, per) if log and c0 > 0 else np.linspace(c0, c1, per)
        xs += grid[1:].tolist()
        ys += (r0 + (grid[1:] - c0) / (c1 - c0) * (r1 - r0)).tolist() if c1 > c0 else [r1] * (per - 1)
    return xs, ys


def plot(report: dict[str, Any], path: str) -> None:
    """Reward against cost: the single models and their hull, the hulls of the router, kNN, logreg and the
    best random mix for the budget (with the router's λ points), and the escalation policy's, as a PNG. A
    curve identical to one drawn before it says so in its label; the router is drawn on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = report["frontier"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    singles = front["singles"]
    costs = [c for c, _ in singles if c > 0]
    log = bool(costs) and max(costs) / min(costs) > 20
    ax.scatter([c for c, _ in singles], [r for _, r in singles], color="grey", s=14, label="single models")
    hull = front["single_hull"]
    ax.plot(*dense(hull, log), color="grey", ls="--", label="single models' hull")
    drawn: dict[str, list[Any]] = {}
    for name in (*(c for c in CURVES if c != "router"), "router"):
        m = front["methods"].get(name)
        if m is None:
            continue
        h = m["hull"]
        same = [other for other, oh in drawn.items() if _same(oh, h)]
        label = name + (f" (= {', '.join(same)})" if same else "")
        top = name == "router"
        ax.plot(
            *dense(h, log),
            lw=2.2 if top else 1.2,
            zorder=5 if top else 3,
            label=label,
            ls="-" if top else ":",
            color="C0" if top else None,
        )
        drawn[name] = h
    pts = front["methods"]["router"]["points"]
    ax.scatter([p[1] for p in pts], [p[2] for p in pts], s=8, color="C0", alpha=0.6, zorder=6)
    esc = report.get("escalation")
    if esc:
        eh = [[p["cost"], p["reward"]] for p in esc["frontier"]]
        ax.plot(
            *dense(eh, log),
            color="C3",
            lw=2.2,
            zorder=7,
            label=f"escalation (check {esc['verifier_accuracy']:.0%}, replayed)",
        )
        ax.scatter([p[1] for p in esc["points"]], [p[2] for p in esc["points"]], s=8, color="C3", zorder=8)
    if log:
        ax.set_xscale("log")
    has_cost = report["router"]["cost"] is not None
    ax.set_xlabel("mean cost per prompt (USD)" if has_cost else "cost (none recorded)")
    ax.set_ylabel("mean normalised reward")
    ax.set_title(f"{report['data']} ({report['n_test']} prompts)")
    if log:
        ax.annotate(
            "mixing two points is a straight line in cost: on this log axis it bends",
            (0.01, 0.01),
            xycoords="axes fraction",
            fontsize=7,
            color="grey",
        )
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _same(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        abs(x[0] - y[0]) <= 1e-12 and abs(x[1] - y[1]) <= 1e-12 for x, y in zip(a, b, strict=True)
    )
