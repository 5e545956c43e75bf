"""The seam where router training fans out: `Executor.map(fn, chunks)` runs a picklable function over chunks
of work (prompts to embed, ES candidates to score) and returns the results in order.

`LocalExecutor` runs them here; `ProcessExecutor` in spawned processes on this machine. A cluster executor
(Ray, issue 17) is one more class with the same `map`. Functions that are expensive to set up (a fitness
that loads a backbone) cache their state per process themselves. Never prints.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        """[fn(c) for c in chunks], in order, wherever the executor runs them."""
        ...

    def close(self) -> None:
        """Release workers (a no-op for executors that hold none)."""
        ...


class LocalExecutor:
    """Everything in this process, one chunk after another."""

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

    def map(self, fn: Callable[[T], R], chunks: Sequence[T]) -> list[R]:
        if self._pool is None:
            self._pool = mp.get_context("spawn").Pool(self.processes)
        return list(self._pool.map(fn, chunks))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


def make_executor(processes: int) -> Executor:
    """`processes` <= 1: local; more: that many spawned processes."""
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
