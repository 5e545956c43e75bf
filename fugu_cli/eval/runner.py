"""Running a suite: every task × arm × repeat in a fresh git repo, scored by the task's check, each outcome
stored in the `outcomes` table for router training.

An arm is one forced worker, "fugu" (the router picks every step) or "ultra" (the conductor). Never prints:
progress goes to the `on_result` callback.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.app import Resolved, assemble, open_store, resolve
from fugu_cli.errors import FuguError, UsageError
from fugu_cli.eval.report import RunRecord, SuiteReport, build_report
from fugu_cli.eval.suite import CheckResult, Suite, Task, make_task_repo, restore_protected, run_check
from fugu_cli.llm import LLM
from fugu_cli.options import RunOptions
from fugu_cli.store import OutcomeRow, Store
from fugu_cli.types import Worker

MODES = ("fugu", "ultra")


@dataclass(frozen=True)
class Arm:
    name: str  # the worker's name, or "fugu" / "ultra"
    worker: str | None  # forced worker; None lets the router (or the conductor) choose
    ultra: bool = False


@dataclass(frozen=True)
class _Job:
    task: Task
    arm: Arm
    repeat: int


@dataclass(frozen=True)
class _Context:
    suite: Suite
    resolved: Resolved  # config, pool and router, resolved once where eval started; every run shares them
    workdir: Path
    store: Store
    llm: LLM | None
    keep: bool


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
    parallel: int = 2,
    llm: LLM | None = None,
    store: Store | None = None,
    keep: bool = False,
    on_result: Callable[[RunRecord], None] | None = None,
) -> SuiteReport:
    """Run every task × arm × repeat (arms in up to `parallel` threads) and store one outcome row per run.

    `opts` gives the pool, router, budget and limits (its cwd is where the pool and config are read); each
    run gets its own fresh repo and session in full-auto mode. `keep` leaves the task repos on disk.
    """
    if repeats < 1 or parallel < 1:
        raise UsageError("--repeats and --parallel must be at least 1")
    resolved = resolve(dataclasses.replace(opts, max_turns=opts.max_turns or suite.max_turns))
    arms = plan_arms(resolved.pool, workers, modes)
    workdir = Path(tempfile.mkdtemp(prefix=f"fugu-eval-{suite.name}-"))
    owned = store is None
    store = store if store is not None else open_store()
    ctx = _Context(suite=suite, resolved=resolved, workdir=workdir, store=store, llm=llm, keep=keep)
    jobs = [_Job(t, a, r) for r in range(repeats) for t in suite.tasks for a in arms]
    started = time.monotonic()
    lock = threading.Lock()

    def one(job: _Job) -> RunRecord:
        record = _run_job(ctx, job)
        if on_result is not None:
            with lock:
                on_result(record)
        return record

    try:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="fugu-eval") as executor:
            records = list(executor.map(one, jobs))
    finally:
        if owned:
            store.close()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return build_report(suite, [a.name for a in arms], records, time.monotonic() - started, str(workdir))


def _run_job(ctx: _Context, job: _Job) -> RunRecord:
    repo = ctx.workdir / f"{job.task.id}--{job.arm.name}--r{job.repeat}"
    started = time.monotonic()
    status, session_id, cost, error = "error", None, 0.0, None
    try:
        make_task_repo(job.task, repo)
        run = dataclasses.replace(
            ctx.resolved.options,
            cwd=repo,
            worker=job.arm.worker,
            ultra=job.arm.ultra,
            permission_mode="full-auto",
            stream=False,
            resume=None,
            continue_last=False,
        )
        session = assemble(ctx.resolved, run, llm=ctx.llm, store=ctx.store)
        session_id = session.id
        cancel = threading.Event()
        timer = threading.Timer(ctx.suite.turn_timeout_s, cancel.set)
        timer.daemon = True
        timer.start()
        try:
            result = session.run_turn(job.task.prompt, cancel=cancel)
        finally:
            timer.cancel()
            session.close()  # its MCP servers, if the configuration gives it any
        status, cost, error = result.status, result.usage.cost_usd, result.error
        if cancel.is_set():
            error = f"the turn ran past the suite's turn_timeout_s ({ctx.suite.turn_timeout_s:g} s)"
    except UsageError:
        raise
    except Exception as e:  # a harness or session bug: reported, never stored as the worker's outcome
        kind = "" if isinstance(e, FuguError) else "crashed: "
        error = f"{kind}{type(e).__name__}: {e}"
        return _record(job, "error", session_id, 0.0, cost, None, error, started, stored=False)
    restore_protected(job.task, repo)
    check = run_check(job.task, repo)
    reward = 1.0 if check.passed else 0.0
    _store_outcome(ctx, job, reward, cost, session_id)
    if not ctx.keep:
        shutil.rmtree(repo, ignore_errors=True)
    return _record(job, status, session_id, reward, cost, check, error, started, stored=True)


def _record(
    job: _Job,
    status: str,
    session_id: str | None,
    reward: float,
    cost: float,
    check: CheckResult | None,
    error: str | None,
    started: float,
    *,
    stored: bool,
) -> RunRecord:
    c = check
    return RunRecord(
        task=job.task.id,
        arm=job.arm.name,
        repeat=job.repeat,
        status=status,
        reward=reward,
        cost_usd=cost,
        session_id=session_id,
        check_exit=None if c is None else c.exit_code,
        check_timed_out=bool(c and c.timed_out),
        check_output=c.output if c else "",
        error=error,
        duration_s=time.monotonic() - started,
        stored=stored,
    )


def _store_outcome(ctx: _Context, job: _Job, reward: float, cost: float, session_id: str | None) -> None:
    source = f"eval:{ctx.suite.name}"
    ctx.store.add_outcome(OutcomeRow(job.task.prompt, job.arm.name, reward, cost, source, session_id))
