"""One router for the whole server. A router's state is caches keyed by content (message vectors, worker
descriptions), so every session and every pass-through call can share one, and the learned router's set-up
(encoding the known workers' descriptions) is paid once instead of per session.

Decisions are CPU work and the router's caches are not thread-safe, so one decision runs at a time; the
decisions asked for while one runs wait, and the next of them to go takes all of them in one batch
(`pick_many`: one backbone forward pass for all their new messages, each decision the one it would be
alone). A router without `pick_many` (the prior) decides the batch one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from fugu_cli.app import RouterSource
from fugu_cli.router import Router
from fugu_cli.types import RouteDecision, RouteState, Stop, Worker

_PickMany = Callable[[Sequence[tuple[RouteState, Sequence[Worker]]]], list[RouteDecision | Exception]]


class _Ask:
    """One waiting decision and, once made, its outcome (a decision or the exception to raise)."""

    __slots__ = ("done", "outcome", "pool", "state")

    def __init__(self, state: RouteState, pool: Sequence[Worker]) -> None:
        self.state = state
        self.pool = pool
        self.outcome: RouteDecision | Exception | None = None
        self.done = False

    def result(self) -> RouteDecision:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        assert self.outcome is not None
        return self.outcome


class _Batched:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.name = router.name
        self.has_roles = bool(getattr(router, "has_roles", False))
        self._many: _PickMany | None = getattr(router, "pick_many", None)
        self._turn = threading.Condition()
        self._waiting: list[_Ask] = []
        self._busy = False  # a batch (or an escalation) is being decided
        self.batches: list[int] = []  # sizes of the last batches (diagnostics and tests)

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        ask = _Ask(state, pool)
        with self._turn:
            self._waiting.append(ask)
            while self._busy and not ask.done:
                self._turn.wait()
            if ask.done:  # decided in another caller's batch
                return ask.result()
            self._busy = True
            batch, self._waiting = self._waiting, []
        outcomes: list[RouteDecision | Exception] = []
        try:
            outcomes = self._decide(batch)
        finally:
            with self._turn:
                for one, outcome in zip(batch, outcomes, strict=False):
                    one.outcome = outcome
                for one in batch:
                    one.outcome = one.outcome or RuntimeError("the router stopped deciding")
                    one.done = True
                self._busy = False
                self.batches = [*self.batches[-63:], len(batch)]
                self._turn.notify_all()
        return ask.result()

    def _decide(self, batch: list[_Ask]) -> list[RouteDecision | Exception]:
        if self._many is not None and len(batch) > 1:
            try:
                return self._many([(a.state, a.pool) for a in batch])
            except Exception:  # one bad request must not fail the others: each alone, as without batching
                pass
        return [self._one(a) for a in batch]

    def _one(self, ask: _Ask) -> RouteDecision | Exception:
        try:
            return self.router.pick(ask.state, ask.pool)
        except Exception as e:
            return e

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        """Alone: no batch runs meanwhile (the router's caches are not thread-safe)."""
        with self._turn:
            while self._busy:
                self._turn.wait()
            self._busy = True
        try:
            return self.router.escalate(state, pool)
        finally:
            with self._turn:
                self._busy = False
                self._turn.notify_all()


# A server's decisions run beside its HTTP work and every request's Python on the same cores: one intra-op
# thread. Two spin and wait for each other on a busy machine (2 shared cores, load 7: a decision took 35 to
# 670 ms on two threads, 12 to 15 ms on one; docs/BENCHMARKS.md, "fugu serve").
SERVE_THREADS = 1


class SharedRouter(RouterSource):
    """A `RouterSource` whose `make` gives every caller the same (batching) router."""

    def __init__(self, source: RouterSource) -> None:
        super().__init__(source.checkpoint, source.cost_weight, SERVE_THREADS)
        source.threads = SERVE_THREADS
        self._source = source
        self._one: _Batched | None = None
        self._making = threading.Lock()

    def make(self) -> Router:
        with self._making:
            if self._one is None:
                self._one = _Batched(self._source.make())
            return self._one
