"""Rendering a `fugu router eval` report: the text table and the reward–cost plot (router, kNN, logreg and
random-mix curves against the single models' hull). Returns text or writes a PNG; never prints.
"""

from __future__ import annotations

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
        fig = report[key]
        cost = "-" if fig["cost"] is None else f"${fig['cost']:.5f}"
        extra = f"  ({fig['worker']})" if key == "best_single" else ""
        extra += "  (overstates what is reachable)" if key == "oracle" else ""
        lines.append(f"  {key:<12} {fig['reward']:>8.4f} {cost:>12}{extra}")
    lines += _frontier_lines(report["frontier"])
    lines += _group_lines(report.get("groups", {}))
    return "\n".join(lines)


def _frontier_lines(front: dict[str, Any]) -> list[str]:
    out = [
        f"  frontier: single models' hull AIQ {front['single_aiq']:.4f}; each method's hull (mixing λs)",
        f"    {'method':<11} {'AIQ':>7} {'min gap':>8} {'max gap':>8} {'saving':>7} {'CPT50':>6} "
        f"{'CPT80':>6} {'APGR':>6}  on/above hull",
    ]
    for name in ("router", "knn", "logreg", "random_mix", "best_single"):
        m = front["methods"].get(name)
        if m is None:
            continue
        v = m["vs_single_hull"]
        out.append(
            f"    {name:<11} {m['aiq']:>7.4f} {_num(v['min_gap'], '+.4f'):>8} "
            f"{_num(v['max_gap'], '+.4f'):>8} "
            f"{v['max_saving']:>7.1%} {_num(m['cpt50'], '.1%'):>6} {_num(m['cpt80'], '.1%'):>6} "
            f"{_num(m['apgr'], '.3f'):>6}  {'yes' if v['on_or_above'] else 'NO'}"
        )
    pts = front["methods"]["router"]["points"]
    if len(pts) > 1:
        out.append("  router λ sweep (λ reward/USD: cost, reward)")
        out += [f"    {lam:<10.4g} ${c:.5f}  {r:.4f}" for lam, c, r in pts]
    return out


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
            f"  {task[:22]:<22} {g['n']:>6} {g['router']:>7.3f} {g['best_single']:>7.3f} {g['knn']:>7.3f} "
            f"{g['logreg']:>7.3f} {g['oracle']:>7.3f} {apgr:>24}"
        )
    return out


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None or v != v else format(v, fmt)


def plot(report: dict[str, Any], path: str) -> None:
    """Reward against cost: the single models and their hull, and the hulls of the router, kNN, logreg and
    the best random mix for the budget (with the router's λ points), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    front = report["frontier"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    singles = front["singles"]
    ax.scatter([c for c, _ in singles], [r for _, r in singles], color="grey", s=14, label="single models")
    hull = front["single_hull"]
    ax.plot([c for c, _ in hull], [r for _, r in hull], color="grey", ls="--", label="single models' hull")
    for name in CURVES:
        m = front["methods"].get(name)
        if m is None:
            continue
        h = m["hull"]
        ax.plot([c for c, _ in h], [r for _, r in h], marker="." if name != "router" else None, label=name)
    pts = front["methods"]["router"]["points"]
    ax.scatter([p[1] for p in pts], [p[2] for p in pts], s=8, color="C0", alpha=0.6)
    costs = [c for c, _ in singles if c > 0]
    if costs and max(costs) / min(costs) > 20:
        ax.set_xscale("log")
    has_cost = report["router"]["cost"] is not None
    ax.set_xlabel("mean cost per prompt (USD)" if has_cost else "cost (none recorded)")
    ax.set_ylabel("mean normalised reward")
    ax.set_title(f"{report['data']} ({report['n_test']} prompts)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
