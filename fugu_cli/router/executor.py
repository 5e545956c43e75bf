"""The seam where router training fans out: `Executor.map(fn, chunks)` runs a picklable function over chunks
of work (prompts to embed, ES candidates to score) and returns the results in order.

`LocalExecutor` runs them here; `ProcessExecutor` in spawned processes on this machine; `RayExecutor` as
tasks on a Ray cluster (`fugu_cli.cluster`). Functions that are expensive to set up (a fitness that loads a
backbone) cache their state per process themselves (`worker_process` says where that pays). Never prints.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from fugu_cli.cluster import Cluster, ClusterSpec

T = TypeVar("T")
R = TypeVar("R")


def worker_process() -> bool:
    """Whether this process works for an executor (a spawned process or a Ray worker), so state a function
    builds on first use is worth keeping for its next chunks."""
    from fugu_cli import cluster

    return mp.current_process().name != "MainProcess" or cluster.IN_CLUSTER_TASK


class Executor(Protocol):
    @property
    def width(self) -> int:
        """How many chunks it runs at once: split work into at least this many."""
        ...

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        """[fn(c) for c in chunks], in order, wherever the executor runs them."""
        ...

    def close(self) -> None:
        """Release workers (a no-op for executors that hold none)."""
        ...


class LocalExecutor:
    """Everything in this process, one chunk after another."""

    width = 1

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        return [fn(c) for c in chunks]

    def close(self) -> None:
        return None


class ProcessExecutor:
    """A pool of spawned processes, started on first use and kept until `close` (spawn, not fork: forking
    after torch has started its threads can deadlock)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: Any = None

    @property
    def width(self) -> int:
        return self.processes

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        if self._pool is None:
            self._pool = mp.get_context("spawn").Pool(self.processes)
        return list(self._pool.map(fn, chunks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


class RayExecutor:
    """Each chunk a task on a Ray cluster (joined, or a local instance started, on first use); the function is
    stored in the cluster once per `map`. A chunk whose worker or node dies is run again."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self._cluster: Cluster | None = None

    def _connected(self) -> Cluster:
        if self._cluster is None:
            from fugu_cli.cluster import Cluster

            self._cluster = Cluster.connect(self.spec)
        return self._cluster

    @property
    def width(self) -> int:
        return self._connected().slots()

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        # a function with a `token` (an ES fitness) is the same object every generation: store it once
        return self._connected().map(fn, chunks, key=getattr(fn, "token", None))

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def make_executor(processes: int, cluster: ClusterSpec | None = None) -> Executor:
    """On a Ray cluster when `cluster` is given; else `processes` <= 1: local; more: spawned processes."""
    if cluster is not None:
        return RayExecutor(cluster)
    return LocalExecutor() if processes <= 1 else ProcessExecutor(processes)


def chunked(items: Sequence[T], n_chunks: int) -> list[list[T]]:
    """`items` in at most `n_chunks` contiguous chunks of near-equal size (none empty)."""
    n = max(1, min(n_chunks, len(items)))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return [c for c in out if c]
