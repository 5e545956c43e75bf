"""`fugu eval SUITE`: run a task suite per worker and per mode, score each run by the task's check, and store
the rewards (table `outcomes`) that routers train on.

`main(EvalOptions)` is what the CLI calls; it prints the report (stdout) and progress (stderr, a live bar on a
terminal). Runs here or on a Ray cluster (`executor`). Never imports ui or cli.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from fugu_cli.errors import FuguError
from fugu_cli.eval.progress import EvalProgress
from fugu_cli.eval.report import RunRecord, SuiteReport, format_text
from fugu_cli.eval.runner import MODES, Arm, plan_arms, run_suite
from fugu_cli.eval.suite import Suite, Task, load_suite, resolve_suite, select_tasks, shipped_suites
from fugu_cli.options import RunOptions

__all__ = [
    "MODES",
    "Arm",
    "EvalOptions",
    "RunRecord",
    "Suite",
    "SuiteReport",
    "Task",
    "load_suite",
    "main",
    "plan_arms",
    "resolve_suite",
    "run_suite",
    "shipped_suites",
]


@dataclass(frozen=True)
class EvalOptions:
    """`fugu eval` flags. Empty `workers` and `modes`: every usable worker plus fugu mode. `run`: what every
    run's session is made from (where eval runs, the pool, the router, limits)."""

    suite: str
    run: RunOptions = field(default_factory=RunOptions)
    workers: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    repeats: int = 1
    parallel: int | None = None  # runs at once (local default 2; on Ray: the cluster's CPUs)
    tasks: list[str] = field(default_factory=list)  # task id globs; empty: every task
    executor: str | None = None  # local | ray (None: [executor] in the config, else local)
    ray_address: str | None = None
    json_out: bool = False
    keep: bool = False


def main(options: EvalOptions) -> int:
    """Run the suite; print the report. 0 when it ran (whatever the rewards), 2 for a usage error, 1 when
    every run crashed before its check, 130 when interrupted (the finished runs are stored)."""
    progress = EvalProgress.for_stderr()
    try:
        suite = select_tasks(load_suite(options.suite), options.tasks)
        report = run_suite(
            suite,
            options.run,
            workers=options.workers or (None if not options.modes else []),
            modes=options.modes,
            repeats=options.repeats,
            parallel=options.parallel,
            keep=options.keep,
            on_plan=progress.plan,
            on_start=progress.started,
            on_result=progress.finished,
            executor=options.executor,
            ray_address=options.ray_address,
        )
    except FuguError as e:
        progress.close()
        print(f"fugu: {e}", file=sys.stderr)
        return e.exit_code
    progress.close()
    if options.json_out:
        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        print(format_text(report))
        if options.keep:
            print(f"task repos kept in {report.workdir}")
    return 1 if report.records and not any(r.stored for r in report.records) else 0
