"""What a suite run measured: per-run records, per-arm means, the best single worker, the oracle, and how the
mode arms (fugu, ultra) compare with the best worker. Pure arithmetic and formatting; never prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fugu_cli.eval.suite import Suite

ORACLE_NOTE = (
    "per task, the best arm in hindsight: overstates what any router can reach when single outcomes are noisy"
)
MODE_ARMS = ("fugu", "ultra")


@dataclass(frozen=True)
class RunRecord:
    """One task × arm × repeat. `stored` is False for a run that crashed before its check (not an outcome)."""

    task: str
    arm: str
    repeat: int
    status: str
    reward: float
    cost_usd: float
    session_id: str | None
    check_exit: int | None
    check_timed_out: bool
    check_output: str
    error: str | None
    duration_s: float
    stored: bool


@dataclass(frozen=True)
class ArmSummary:
    arm: str
    kind: str  # "worker" or "mode"
    runs: int  # scored runs (crashed ones are counted in `errors` only)
    solved: int
    mean_reward: float | None
    mean_cost_usd: float | None
    total_cost_usd: float
    errors: int


@dataclass(frozen=True)
class Oracle:
    mean_reward: float
    solved_tasks: int
    mean_cost_usd: float  # per task, the cheapest arm reaching that task's best reward
    note: str = ORACLE_NOTE


@dataclass(frozen=True)
class Comparison:
    """A mode arm against the best single worker."""

    arm: str
    mean_reward: float | None
    mean_cost_usd: float | None
    best_worker: str | None
    reward_delta: float | None  # arm - best worker
    cost_ratio: float | None  # arm / best worker (None when the best worker cost nothing)


@dataclass(frozen=True)
class SuiteReport:
    suite: str
    path: str
    arms: tuple[str, ...]
    tasks: tuple[str, ...]
    repeats: int
    summaries: tuple[ArmSummary, ...]
    cells: Mapping[str, Mapping[str, float | None]]  # task id -> arm -> mean reward over repeats
    best_worker: str | None
    oracle: Oracle
    comparisons: tuple[Comparison, ...]
    records: tuple[RunRecord, ...]
    duration_s: float
    workdir: str

    def summary(self, arm: str) -> ArmSummary:
        return next(s for s in self.summaries if s.arm == arm)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["records"] = [{k: v for k, v in r.items() if k != "check_output"} for r in data["records"]]
        data["cells"] = {t: dict(arms) for t, arms in self.cells.items()}
        return data


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def build_report(
    suite: Suite, arms: Sequence[str], records: Sequence[RunRecord], duration_s: float, workdir: str
) -> SuiteReport:
    scored = [r for r in records if r.stored]
    summaries = tuple(_summary(a, [r for r in records if r.arm == a]) for a in arms)
    tasks = tuple(t.id for t in suite.tasks)
    cells = {
        t: {a: _mean([r.reward for r in scored if r.task == t and r.arm == a]) for a in arms} for t in tasks
    }
    costs = {
        t: {a: _mean([r.cost_usd for r in scored if r.task == t and r.arm == a]) for a in arms} for t in tasks
    }
    workers = [s for s in summaries if s.kind == "worker" and s.mean_reward is not None]
    best = max(workers, key=lambda s: (s.mean_reward or 0.0, -(s.mean_cost_usd or 0.0)), default=None)
    comparisons = tuple(_compare(s, best) for s in summaries if s.kind == "mode")
    return SuiteReport(
        suite=suite.name,
        path=str(suite.path),
        arms=tuple(arms),
        tasks=tasks,
        repeats=1 + max((r.repeat for r in records), default=0),
        summaries=summaries,
        cells=cells,
        best_worker=best.arm if best else None,
        oracle=_oracle(cells, costs),
        comparisons=comparisons,
        records=tuple(records),
        duration_s=duration_s,
        workdir=workdir,
    )


def _summary(arm: str, runs: Sequence[RunRecord]) -> ArmSummary:
    scored = [r for r in runs if r.stored]
    return ArmSummary(
        arm=arm,
        kind="mode" if arm in MODE_ARMS else "worker",
        runs=len(scored),
        solved=sum(1 for r in scored if r.reward >= 1.0),
        mean_reward=_mean([r.reward for r in scored]),
        mean_cost_usd=_mean([r.cost_usd for r in scored]),
        total_cost_usd=sum(r.cost_usd for r in runs),
        errors=sum(1 for r in runs if not r.stored),
    )


def _oracle(
    cells: Mapping[str, Mapping[str, float | None]], costs: Mapping[str, Mapping[str, float | None]]
) -> Oracle:
    best: list[float] = []
    cheapest: list[float] = []
    for task, by_arm in cells.items():
        measured = {a: v for a, v in by_arm.items() if v is not None}
        if not measured:
            continue
        top = max(measured.values())
        best.append(top)
        cheapest.append(min(costs[task][a] or 0.0 for a, v in measured.items() if v == top))
    return Oracle(
        mean_reward=_mean(best) or 0.0,
        solved_tasks=sum(1 for b in best if b > 0),
        mean_cost_usd=_mean(cheapest) or 0.0,
    )


def _compare(mode: ArmSummary, best: ArmSummary | None) -> Comparison:
    delta = ratio = None
    if best is not None and mode.mean_reward is not None and best.mean_reward is not None:
        delta = mode.mean_reward - best.mean_reward
        if mode.mean_cost_usd is not None and best.mean_cost_usd:
            ratio = mode.mean_cost_usd / best.mean_cost_usd
    return Comparison(
        arm=mode.arm,
        mean_reward=mode.mean_reward,
        mean_cost_usd=mode.mean_cost_usd,
        best_worker=best.arm if best else None,
        reward_delta=delta,
        cost_ratio=ratio,
    )


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_text(report: SuiteReport) -> str:
    """A table of arms, then the best worker, the oracle and the mode comparisons, for a terminal."""
    n = len(report.tasks)
    lines = [
        f"suite {report.suite}: {n} task{'s' * (n != 1)} × {len(report.arms)} arms"
        f" × {report.repeats} repeat{'s' * (report.repeats != 1)} in {report.duration_s:.1f} s",
        "",
        f"{'arm':<20} {'solved':>9} {'reward':>7} {'cost/run':>10} {'total':>10} {'errors':>6}",
    ]
    for s in report.summaries:
        lines.append(
            f"{s.arm:<20} {f'{s.solved}/{s.runs}':>9} {_num(s.mean_reward, '.2f'):>7}"
            f" {_num(s.mean_cost_usd, '.4f'):>10} {s.total_cost_usd:>10.4f} {s.errors:>6}"
        )
    lines.append("")
    if report.best_worker:
        b = report.summary(report.best_worker)
        lines.append(f"best single worker: {b.arm} (reward {_num(b.mean_reward, '.2f')})")
    o = report.oracle
    lines.append(
        f"oracle: reward {o.mean_reward:.2f}, {o.solved_tasks}/{n} tasks solved by some arm,"
        f" ${o.mean_cost_usd:.4f}/task ({o.note})"
    )
    for c in report.comparisons:
        if c.reward_delta is None:
            lines.append(f"{c.arm}: no single worker to compare with")
            continue
        ratio = "" if c.cost_ratio is None else f", {c.cost_ratio:.2f}× its cost"
        lines.append(f"{c.arm} vs {c.best_worker}: reward {c.reward_delta:+.2f}{ratio}")
    failed = [r for r in report.records if r.error and not r.stored]
    for r in failed[:5]:
        lines.append(f"error: {r.task} / {r.arm}: {r.error}")
    return "\n".join(lines)
