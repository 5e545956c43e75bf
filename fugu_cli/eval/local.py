"""The local executor of eval jobs (the default): up to `parallel` jobs at once in threads of this process,
writing straight into the user's store. Ctrl-C (or `stop`) cancels the running turns and starts no more.

Never prints: progress goes to `JobEvents`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait

from fugu_cli.errors import Interrupted
from fugu_cli.eval.jobs import Job, JobContext, JobEvents, run_job
from fugu_cli.eval.report import RunRecord


def run_local(
    ctx: JobContext, jobs: Sequence[Job], parallel: int, events: JobEvents, stop: threading.Event
) -> list[RunRecord]:
    """Every job's record, in the order of `jobs`. Raises Interrupted when stopped (what finished is stored)
    and the first UsageError a job raised (after stopping the others)."""
    lock = threading.Lock()
    running: dict[str, threading.Event] = {}

    def one(job: Job) -> RunRecord | None:
        cancel = threading.Event()
        with lock:
            if stop.is_set():
                return None
            running[job.key] = cancel
        events.started(job)
        try:
            record = run_job(ctx, job, cancel)
        finally:
            with lock:
                running.pop(job.key, None)
        events.finished(record)
        return record

    pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="fugu-eval")
    futures: list[Future[RunRecord | None]] = [pool.submit(one, j) for j in jobs]
    try:
        pending = set(futures)
        while pending and not stop.is_set():
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
            if any(f.exception() is not None for f in done):
                stop.set()
    except KeyboardInterrupt:
        stop.set()
    finally:
        if stop.is_set():
            with lock:
                for cancel in running.values():
                    cancel.set()
        pool.shutdown(wait=True, cancel_futures=True)
    failed = next((f.exception() for f in futures if f.done() and f.exception() is not None), None)
    if failed is not None:
        raise failed
    records = [f.result() for f in futures if not f.cancelled()]
    if stop.is_set() or any(r is None for r in records):
        raise Interrupted(interrupted(sum(bool(r and r.stored) for r in records), len(jobs)))
    return [r for r in records if r is not None]


def interrupted(stored: int, total: int) -> str:
    return f"interrupted: {stored} of {total} runs finished and stored"
