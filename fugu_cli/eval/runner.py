"""Running a suite: every task × arm × repeat in a fresh git repo, scored by the task's check, each outcome
stored in the `outcomes` table for router training; here in threads (`eval/local.py`, the default) or as
tasks on a Ray cluster (`eval/on_ray.py`: `--executor ray` or `[executor] kind = "ray"`).

An arm is one forced worker, "fugu" (the router picks every step) or "ultra" (the conductor). Never prints:
progress goes to the `on_start` / `on_result` callbacks.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from fugu_cli import cluster
from fugu_cli.app import Resolved, open_store, resolve
from fugu_cli.calls import HealthSettings, WorkerHealth
from fugu_cli.errors import UsageError
from fugu_cli.eval.jobs import Arm, Job, JobContext, JobEvents
from fugu_cli.eval.report import RunRecord, SuiteReport, build_report
from fugu_cli.eval.suite import Suite
from fugu_cli.llm import LLM
from fugu_cli.options import RunOptions
from fugu_cli.store import Store
from fugu_cli.types import Worker

MODES = ("fugu", "ultra")

__all__ = ["MODES", "Arm", "Job", "plan_arms", "run_suite"]


def plan_arms(pool: Sequence[Worker], workers: Sequence[str] | None, modes: Sequence[str]) -> list[Arm]:
    """The arms to run. Neither workers nor modes given: every usable worker and fugu mode."""
    names = [w.name for w in pool]
    bad_modes = [m for m in modes if m not in MODES]
    if bad_modes:
        raise UsageError(f"--mode {bad_modes[0]}: choose fugu or ultra")
    clash = [n for n in names if n in MODES]
    if clash:
        raise UsageError(f"a worker is named {clash[0]!r}, like a mode arm: rename it in the pool")
    if workers is None and not modes:
        workers, modes = names, ["fugu"]
    chosen = list(dict.fromkeys(workers or []))
    unknown = [w for w in chosen if w not in names]
    if unknown:
        raise UsageError(f"--worker {unknown[0]}: no such usable worker; choose one of: {', '.join(names)}")
    arms = [Arm(w, w) for w in chosen]
    arms += [Arm(m, None, ultra=m == "ultra") for m in dict.fromkeys(modes)]
    if not arms:
        raise UsageError("nothing to evaluate: give --worker NAME or --mode fugu|ultra")
    return arms


def run_suite(
    suite: Suite,
    opts: RunOptions,
    *,
    workers: Sequence[str] | None = None,
    modes: Sequence[str] = (),
    repeats: int = 1,
    parallel: int | None = None,
    llm: LLM | None = None,
    store: Store | None = None,
    keep: bool = False,
    on_result: Callable[[RunRecord], None] | None = None,
    on_start: Callable[[Job], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    stop: threading.Event | None = None,
) -> SuiteReport:
    """Run every task × arm × repeat and store one outcome row per run (with its session) in `store`.

    `opts` gives the pool, router, budget and limits (its cwd is where the pool and config are read); each
    run gets its own fresh repo and session in full-auto mode. Locally up to `parallel` runs at once
    (default 2); on Ray (`executor`, `ray_address`, or `[executor]` in the config) up to `parallel` on the
    cluster (default: as many as it has CPUs for). `keep` leaves the task repos on disk (local only);
    `on_plan` hears the number of runs; `stop` set, or Ctrl-C, cancels the runs (Interrupted).
    """
    if repeats < 1 or (parallel is not None and parallel < 1):
        raise UsageError("--repeats and --parallel must be at least 1")
    resolved = resolve(dataclasses.replace(opts, max_turns=opts.max_turns or suite.max_turns))
    # every run measures its arm afresh: one run's failures must not make the next skip a worker (its
    # outcome is stored under the arm's name)
    resolved = dataclasses.replace(resolved, health=WorkerHealth(HealthSettings(cooldown_s=0)))
    arms = plan_arms(resolved.pool, workers, modes)
    spec = _cluster_spec(resolved, executor, ray_address)
    if spec is not None and keep:
        raise UsageError("--keep keeps task repos on this machine: with --executor ray they are on the nodes")
    if spec is not None and llm is not None:
        raise ValueError("an injected LLM stays in this process: run_suite with Ray reaches workers by HTTP")
    jobs = [Job(t, a, r) for r in range(repeats) for t in suite.tasks for a in arms]
    if on_plan is not None:
        on_plan(len(jobs))
    workdir = Path(tempfile.mkdtemp(prefix=f"fugu-eval-{suite.name}-"))
    owned = store is None
    store = store if store is not None else open_store()
    ctx = JobContext(suite=suite, resolved=resolved, workdir=workdir, store=store, llm=llm, keep=keep)
    events = _events(on_start, on_result)
    started = time.monotonic()
    try:
        if spec is None:
            from fugu_cli.eval.local import run_local

            records = run_local(ctx, jobs, parallel or 2, events, stop or threading.Event())
        else:
            from fugu_cli.eval.on_ray import run_ray

            records = run_ray(ctx, jobs, spec, parallel, events, stop or threading.Event())
    finally:
        if owned:
            store.close()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return build_report(suite, [a.name for a in arms], records, time.monotonic() - started, str(workdir))


def _cluster_spec(
    resolved: Resolved, executor: str | None, address: str | None
) -> cluster.ClusterSpec | None:
    """Where the jobs run: None here; else the Ray cluster, with the pool's keys in its tasks' environment."""
    keys = cluster.forwarded_env([w.api_key_env for w in resolved.pool])
    return cluster.choose(resolved.config.executor, executor, address, keys)


def _events(
    on_start: Callable[[Job], None] | None, on_result: Callable[[RunRecord], None] | None
) -> JobEvents:
    """Callbacks made safe to call from several threads at once."""
    lock = threading.Lock()

    def started(job: Job) -> None:
        if on_start is not None:
            with lock:
                on_start(job)

    def finished(record: RunRecord) -> None:
        if on_result is not None:
            with lock:
                on_result(record)

    return JobEvents(started, finished)
