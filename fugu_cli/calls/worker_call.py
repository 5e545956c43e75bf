"""`WorkerCall`: the one way fugu calls a worker. Route (the caller's router, told which workers failed in
this call and which are cooling down) → attempts at the chosen worker (retries with backoff, honouring
Retry-After; a worker on probation gets one) → on its failure, route again without it (failover) → a ledger
row for every failed attempt, and the worker's health updated. Used by the agent loop (sessions, ultra steps,
the conductor), compaction's summarizer and serve's pass-through.

Knows nothing of what is sent: `send` makes one attempt (fugu_cli/llm), `route` picks. Never prints.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from fugu_cli.calls.health import Condition, WorkerHealth
from fugu_cli.errors import ContextOverflow, Interrupted, ProviderError
from fugu_cli.ledger import StepRecord, TurnLedger
from fugu_cli.types import RouteDecision, Usage, Worker

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """`max_retries` counts retries after the first attempt (so 2 means at most 3 attempts at a worker)."""

    max_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0

    def delay(self, retry: int, error: ProviderError) -> float:
        """Seconds to wait before retry number `retry` (0-based): what Retry-After asked, else exponential
        backoff with jitter; never more than `backoff_max_s`."""
        if error.retry_after_s is not None:
            return min(max(error.retry_after_s, 0.0), self.backoff_max_s)
        backoff = self.backoff_base_s * float(2**retry) * (0.5 + random.random())
        return min(backoff, self.backoff_max_s)


@dataclass(frozen=True)
class Try:
    """One attempt: at which worker, chosen how, its number at that worker in this call, and whether the
    worker is on probation after a cool-down (then it is the only attempt)."""

    worker: Worker
    decision: RouteDecision
    number: int
    probe: bool = False


@dataclass(frozen=True)
class Backoff:
    """A wait before the next attempt at the same worker."""

    seconds: float


@dataclass(frozen=True)
class Exclusions:
    """What `route` must avoid: workers given up on in this call (and why) and workers cooling down."""

    failed: Mapping[str, str]
    cooling: Mapping[str, str]
    failover: bool = False  # this pick replaces a worker that failed in this call

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.failed) | frozenset(self.cooling)


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A successful call: the value `send` returned, where it came from, and the workers that failed first."""

    value: T
    decision: RouteDecision
    worker: Worker
    started: float  # wall clock of the successful attempt
    api_ms: float  # time spent at this worker, its failed attempts and backoff included
    failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call(Generic[T]):
    """What one call needs: how to pick, how to make one attempt, where its rows go, the caller's hooks."""

    pool: Sequence[Worker]  # the workers `route` may choose from
    route: Callable[[Exclusions], RouteDecision]  # raises LookupError when nobody is left
    send: Callable[[Try], T]
    ledger: TurnLedger | None = None
    step: int = 1
    cancel: threading.Event | None = None
    failed: Mapping[str, str] = field(default_factory=dict)  # given up on before this call (earlier steps)
    # the request's fault was fixed (a transcript compacted after ContextOverflow): route again, no failover
    recover: Callable[[Try, ProviderError], bool] | None = None
    routed: Callable[[RouteDecision], None] | None = None  # a worker was chosen (the route line)
    failing: Callable[[Try, ProviderError, float], None] | None = None  # a worker failed; ms spent on it
    # an attempt failed and the next is `seconds` away (the user sees why nothing is happening)
    retrying: Callable[[Try, ProviderError, float, int], None] | None = None  # + the attempts in all


class AllFailed(ProviderError):
    """Nobody is left: every worker failed this call, or was cooling down (then nothing was sent). When
    cooling caused it, `retry_after_s` says when the first of them is probed again."""

    def __init__(
        self, failures: Sequence[ProviderError], cooling: Mapping[str, Condition], now: float
    ) -> None:
        parts = [str(f) for f in failures]
        parts += [f"{name} {c.describe(now)}" for name, c in cooling.items()]
        if failures:
            head = "every worker failed: "
        else:
            head = (
                "every worker is cooling down after failing, so nothing was sent (`fugu pool` shows them): "
            )
        first = min((c.left_s(now) for c in cooling.values()), default=None)
        super().__init__(head + ("; ".join(parts) or "the pool has no worker"), retry_after_s=first)
        self.failures = tuple(failures)
        self.cooling = dict(cooling)


class WorkerCall:
    """Calls workers. Shared by every session of a process, so their workers' health is shared."""

    def __init__(self, health: WorkerHealth | None = None, retry: RetryPolicy | None = None) -> None:
        self.health = health or WorkerHealth()
        self.retry = retry or RetryPolicy()

    def run(self, call: Call[T]) -> Answer[T]:
        """Route and attempt until a worker answers. Raises `AllFailed` when nobody is left and `Interrupted`
        when `call.cancel` is set; a failed attempt never raises anything else."""
        plan = self._plan(call)
        reply: Any = None
        error: BaseException | None = None
        while True:
            op = _advance(plan, reply, error)
            if isinstance(op, Answer):
                return op
            reply, error = None, None
            try:
                if isinstance(op, Try):
                    reply = call.send(op)
                else:
                    _sleep(op.seconds, call.cancel)
            except BaseException as e:
                error = e

    async def arun(self, call: Call[Coroutine[Any, Any, T]]) -> Answer[T]:
        """`run` in an event loop: each attempt is `await call.send(attempt)`, each backoff an asyncio sleep.
        The same routing, retries, failover, rows and health as `run`."""
        import asyncio  # here: a process that never serves from an event loop does not import it (~40 ms)

        plan = self._plan(call)
        reply: Any = None
        error: BaseException | None = None
        while True:
            op = _advance(plan, reply, error)
            if isinstance(op, Answer):
                return op
            reply, error = None, None
            try:
                if isinstance(op, Try):
                    reply = await call.send(op)
                else:
                    await _asleep(op.seconds, call.cancel)
            except asyncio.CancelledError:
                if call.cancel is None or not call.cancel.is_set():
                    raise
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()  # the call's own cancel: it ends as `Interrupted`, with its row
                error = Interrupted("interrupted while waiting for a worker")
            except BaseException as e:
                error = e

    def _plan(self, call: Call[Any]) -> Generator[Try | Backoff, Any, Answer[Any]]:
        """The call's logic, without its waiting: yields each attempt (sent the attempt's value, or thrown
        its error) and each backoff (sent None, or thrown `Interrupted`); returns the answer."""
        workers = {w.name: w for w in call.pool}
        failed = dict(call.failed)
        errors: list[ProviderError] = []
        failover = False
        while True:
            _check(call.cancel)
            now = self.health.clock()
            cooling = self.health.cooling(w for n, w in workers.items() if n not in failed)
            said = {n: c.describe(now) for n, c in cooling.items()}
            try:
                decision = call.route(Exclusions(dict(failed), said, failover))
            except LookupError:
                raise AllFailed(errors, cooling, now) from None
            worker = workers[decision.worker]
            probe = self.health.enabled and self.health.probing(worker)
            decision = _noted(decision, said, worker.name if probe else None)
            if call.ledger is not None:
                call.ledger.route(call.step, decision)
            if call.routed is not None:
                call.routed(decision)
            clock = time.monotonic()
            try:
                value, started = yield from self._attempts(call, worker, decision, probe)
            except ProviderError as e:
                spent = (time.monotonic() - clock) * 1000.0
                if call.failing is not None:
                    call.failing(Try(worker, decision, 0, probe), e, spent)
                self.health.failed(worker, e)
                if call.recover is not None and call.recover(Try(worker, decision, 0, probe), e):
                    continue  # the same call again, its request fixed: not a failover
                failed[worker.name] = str(e)
                errors.append(e)
                failover = True
                continue
            self.health.recovered(worker)
            spent = (time.monotonic() - clock) * 1000.0
            fresh = tuple(n for n in failed if n not in call.failed)
            return Answer(value, decision, worker, started, spent, fresh)

    def _attempts(
        self, call: Call[Any], worker: Worker, decision: RouteDecision, probe: bool
    ) -> Generator[Try | Backoff, Any, tuple[Any, float]]:
        """Attempt `worker` until it answers or its attempts are spent (one for a probe); each failed
        attempt is a ledger row. Raises the last attempt's error."""
        attempts = 1 if probe else self.retry.max_retries + 1
        for number in range(1, attempts + 1):
            _check(call.cancel)
            attempt = Try(worker, decision, number, probe)
            started = time.time()
            try:
                value = yield attempt
                return value, started
            except Interrupted:
                self._row(call, attempt, "interrupted", "", started)
                raise
            except ProviderError as e:
                if number > 1 and number == attempts and e.retryable:
                    e.args = (f"{e} (after {number} attempts)", *e.args[1:])
                status = "context_overflow" if isinstance(e, ContextOverflow) else "provider_error"
                self._row(call, attempt, status, str(e), started)
                if not e.retryable or number == attempts:
                    raise
                delay = self.retry.delay(number - 1, e)
                if call.retrying is not None:
                    call.retrying(attempt, e, delay, attempts)
                yield Backoff(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _row(self, call: Call[T], attempt: Try, status: str, text: str, started: float) -> None:
        if call.ledger is not None:
            call.ledger.step(StepRecord(call.step, attempt.decision, status, Usage(), text, started))


def _advance(
    plan: Generator[Try | Backoff, Any, Answer[Any]], reply: Any, error: BaseException | None
) -> Try | Backoff | Answer[Any]:
    """The plan's next step, given the last one's value or error: an attempt, a backoff, or its answer."""
    try:
        return plan.throw(error) if error is not None else plan.send(reply)
    except StopIteration as done:
        answer: Answer[Any] = done.value
        return answer


def _noted(decision: RouteDecision, cooling: Mapping[str, str], probed: str | None) -> RouteDecision:
    """The decision's reason, with the workers it could not choose because they are cooling down (the route
    line says why a worker is skipped) and the probe of one whose cool-down is over."""
    notes = [f"{name} {why}" for name, why in cooling.items()]
    if probed is not None:
        notes.append(f"{probed} is probed after its cool-down (one attempt)")
    if not notes:
        return decision
    reason = "; ".join(x for x in (decision.reason, *notes) if x)
    return dataclasses.replace(decision, reason=reason)


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Interrupted("interrupted")


async def _asleep(seconds: float, cancel: threading.Event | None) -> None:
    """A backoff in the event loop, ended early (as `Interrupted`) when `cancel` is set."""
    import asyncio

    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        _check(cancel)
        await asyncio.sleep(min(left, 0.05))
    if cancel is not None and cancel.is_set():
        raise Interrupted("interrupted during retry backoff")


def _sleep(seconds: float, cancel: threading.Event | None) -> None:
    if cancel is None:
        time.sleep(seconds)
    elif cancel.wait(seconds):
        raise Interrupted("interrupted during retry backoff")
