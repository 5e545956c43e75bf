"""One eval job (task × arm × repeat): a fresh git repo, one full-auto session, the hidden files put in, the
check run, the outcome stored. The same function runs a job here (local executor) and on a cluster node
(`eval/on_ray.py`, with the node's scratch store).

Never prints; raises only UsageError (a harness or session failure becomes the record's error).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.app import Resolved, assemble
from fugu_cli.errors import FuguError, UsageError
from fugu_cli.eval.report import RunRecord
from fugu_cli.eval.suite import CheckResult, Suite, Task, make_task_repo, prepare_check, run_check
from fugu_cli.llm import LLM
from fugu_cli.store import OutcomeRow, Store

log = logging.getLogger("fugu")


@dataclass(frozen=True)
class Arm:
    name: str  # the worker's name, or "fugu" / "ultra"
    worker: str | None  # forced worker; None lets the router (or the conductor) choose
    ultra: bool = False


@dataclass(frozen=True)
class Job:
    task: Task
    arm: Arm
    repeat: int

    @property
    def key(self) -> str:
        return f"{self.task.id}--{self.arm.name}--r{self.repeat}"


@dataclass(frozen=True)
class JobContext:
    suite: Suite
    resolved: Resolved  # config, pool and router, resolved once where eval started; every run shares them
    workdir: Path  # where the job's repo is made
    store: Store  # where its session and outcome are written
    llm: LLM | None
    keep: bool


@dataclass(frozen=True)
class JobEvents:
    """What an executor reports while it works: a job started (or was sent to the cluster), a job ended."""

    started: Callable[[Job], None] = lambda _job: None
    finished: Callable[[RunRecord], None] = lambda _record: None


def run_job(ctx: JobContext, job: Job, cancel: threading.Event | None = None) -> RunRecord:
    """Run one job. `cancel` (this job's own event) set from outside (Ctrl-C) stops its turn; an
    interrupted run is not an outcome."""
    repo = ctx.workdir / job.key
    started = time.monotonic()
    status, session_id, cost, error = "error", None, 0.0, None
    cancel = cancel or threading.Event()
    timed_out = threading.Event()
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

        def expire() -> None:
            timed_out.set()
            cancel.set()

        timer = threading.Timer(ctx.suite.turn_timeout_s, expire)
        timer.daemon = True
        timer.start()
        try:
            result = session.run_turn(job.task.prompt, cancel=cancel)
        finally:
            timer.cancel()
            session.close()  # its MCP servers, if the configuration gives it any
        status, cost, error = result.status, result.usage.cost_usd, result.error
        if timed_out.is_set():
            error = f"the turn ran past the suite's turn_timeout_s ({ctx.suite.turn_timeout_s:g} s)"
        elif cancel.is_set():
            return _record(job, "interrupted", session_id, 0.0, cost, None, "interrupted", started, False)
    except UsageError:
        raise
    except Exception as e:  # a harness or session bug: reported, never stored as the worker's outcome
        log.error("eval job %s failed", job.key, exc_info=e)
        kind = "" if isinstance(e, FuguError) else "crashed: "
        error = f"{kind}{type(e).__name__}: {e}"
        return _record(job, "error", session_id, 0.0, cost, None, error, started, stored=False)
    prepare_check(job.task, repo)
    check = run_check(job.task, repo)
    reward = 1.0 if check.passed else 0.0
    source = f"eval:{ctx.suite.name}"
    ctx.store.add_outcome(OutcomeRow(job.task.prompt, job.arm.name, reward, cost, source, session_id))
    if not ctx.keep:
        shutil.rmtree(repo, ignore_errors=True)
    return _record(job, status, session_id, reward, cost, check, error, started, stored=True)


def _record(
    job: Job,
    status: str,
    session_id: str | None,
    reward: float,
    cost: float,
    check: CheckResult | None,
    error: str | None,
    started: float,
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


def lost_record(job: Job, error: str, started: float) -> RunRecord:
    """A job that never came back (its node died too often, or it was cancelled): not an outcome."""
    return _record(job, "error", None, 0.0, 0.0, None, error, started, stored=False)
