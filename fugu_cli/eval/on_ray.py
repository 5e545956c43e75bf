"""The Ray executor of eval jobs: each job a Ray task with its own scratch repo, FUGU_HOME and store on the
node; the node ships back the run's record and its session's rows (`Store.export_session`: ledger, transcript,
memory, compactions, outcome), which the driver writes into the user's store (`Store.import_session`).

A job whose worker process or node dies is re-run by Ray (`[executor] max_retries`); the dead attempt's rows
never left its node, so nothing is lost or doubled. Ctrl-C (or `stop`) cancels the cluster's tasks. A task's
repo folder travels through the object store, so nodes need only fugu installed; so do the driver's kept
answers about models, so a node imports litellm only for a model the driver never met. Never prints.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.app import Resolved, model_info_path
from fugu_cli.cluster import Cluster, ClusterSpec, TaskCancelled, TaskLost, TaskRef
from fugu_cli.errors import Interrupted, UsageError
from fugu_cli.eval.jobs import Job, JobContext, JobEvents, lost_record, run_job
from fugu_cli.eval.report import RunRecord
from fugu_cli.eval.suite import Suite
from fugu_cli.redact import register_secret_env
from fugu_cli.store import SessionExport, Store

log = logging.getLogger("fugu")

_POLL_S = 0.2


@dataclass(frozen=True)
class NodeContext:
    """What every job of one run shares on the nodes (stored in the cluster once). `model_info`: the
    driver's kept answers of litellm about models (`app.model_info_path`'s file), which each job's fresh
    FUGU_HOME starts with, so that a node looks up a worker's window without importing litellm (seconds of
    CPU in every worker process) where its litellm has the same table (`ModelInfo` checks)."""

    suite: Suite
    resolved: Resolved
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    model_info: bytes | None = None


@dataclass(frozen=True)
class NodeResult:
    record: RunRecord
    export: SessionExport | None  # the session's rows (None when the run never got a session)


# per worker process: the first copy of a run's Resolved it saw, so its router's backbone loads once
_RESOLVED: dict[str, Resolved] = {}


def run_on_node(ctx: NodeContext, job: Job, archive: bytes | None) -> NodeResult:
    """One job on a cluster node, in a scratch folder that is removed afterwards."""
    resolved = _RESOLVED.setdefault(ctx.token, ctx.resolved)
    register_secret_env(w.api_key_env for w in resolved.pool)
    scratch = Path(tempfile.mkdtemp(prefix="fugu-eval-job-"))
    try:
        with _fugu_home(scratch / "home"):
            if ctx.model_info is not None:
                kept = model_info_path()
                kept.parent.mkdir(parents=True)
                kept.write_bytes(ctx.model_info)
            if archive is not None:
                src = unpack_repo(archive, scratch / "src")
                job = dataclasses.replace(job, task=dataclasses.replace(job.task, repo=src))
            store = Store(scratch / "home" / "fugu.db")
            try:
                work = JobContext(ctx.suite, resolved, scratch, store, llm=None, keep=False)
                record = run_job(work, job)
                sid = record.session_id
                return NodeResult(record, store.export_session(sid) if sid else None)
            finally:
                store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _fugu_home(home: Path) -> Iterator[None]:
    """FUGU_HOME for one job (a Ray worker process runs one task at a time)."""
    before = os.environ.get("FUGU_HOME")
    os.environ["FUGU_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("FUGU_HOME", None)
        else:
            os.environ["FUGU_HOME"] = before


def _kept_model_info() -> bytes | None:
    try:
        return model_info_path().read_bytes()
    except OSError:  # none kept yet: the nodes ask litellm
        return None


def pack_repo(folder: Path) -> bytes:
    """A task's repo folder as a gzipped tar (without .git), to send to a node."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname=".", filter=lambda i: None if ".git" in Path(i.name).parts else i)
    return buf.getvalue()


def unpack_repo(archive: bytes, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own driver's archive of a suite folder
    return dest


def run_ray(
    ctx: JobContext,
    jobs: Sequence[Job],
    spec: ClusterSpec,
    window: int | None,
    events: JobEvents,
    stop: threading.Event,
) -> list[RunRecord]:
    """Every job's record, in the order of `jobs`, with its session imported into `ctx.store`. At most
    `window` jobs are on the cluster at once (None: as many as it has CPUs for)."""
    cluster = Cluster.connect(spec)
    try:
        return _Driver(cluster, ctx, events, stop).run(jobs, window or cluster.slots())
    finally:
        cluster.close()


class _Driver:
    def __init__(self, cluster: Cluster, ctx: JobContext, events: JobEvents, stop: threading.Event) -> None:
        self.cluster = cluster
        self.ctx = ctx
        self.events = events
        self.stop = stop
        self.shared = cluster.put(NodeContext(ctx.suite, ctx.resolved, model_info=_kept_model_info()))
        self.archives: dict[str, Any] = {}

    def run(self, jobs: Sequence[Job], window: int) -> list[RunRecord]:
        queue = deque(enumerate(jobs))
        running: dict[TaskRef[NodeResult], tuple[int, Job, float]] = {}
        records: dict[int, RunRecord] = {}
        try:
            while queue or running:
                if self.stop.is_set():
                    raise KeyboardInterrupt
                while queue and len(running) < window:
                    i, job = queue.popleft()
                    running[self._submit(job)] = (i, job, time.monotonic())
                    self.events.started(job)
                for task in self.cluster.wait(list(running), _POLL_S):
                    i, job, started = running.pop(task)
                    records[i] = self._collect(task, job, started)
                    self.events.finished(records[i])
        except KeyboardInterrupt:
            self.stop.set()
            self.cluster.cancel(list(running))
            stored = sum(r.stored for r in records.values())
            raise Interrupted(f"interrupted: {stored} of {len(jobs)} runs finished and stored") from None
        except BaseException:
            self.cluster.cancel(list(running))
            raise
        return [records[i] for i in range(len(jobs))]

    def _submit(self, job: Job) -> TaskRef[NodeResult]:
        archive = None
        if job.task.repo is not None:
            if job.task.id not in self.archives:
                self.archives[job.task.id] = self.cluster.put(pack_repo(job.task.repo))
            archive = self.archives[job.task.id]
        return self.cluster.submit(run_on_node, self.shared, job, archive)

    def _collect(self, task: TaskRef[NodeResult], job: Job, started: float) -> RunRecord:
        try:
            result = self.cluster.result(task)
        except UsageError:
            raise
        except (TaskLost, TaskCancelled) as e:
            return lost_record(job, f"lost on the cluster: {e}", started)
        except Exception as e:  # the node could not run fugu at all (a missing package, another version)
            log.error("eval job %s crashed on the cluster", job.key, exc_info=e)
            return lost_record(job, f"crashed on the cluster: {type(e).__name__}: {e}", started)
        if result.export is not None:
            self.ctx.store.import_session(result.export)
        return result.record
