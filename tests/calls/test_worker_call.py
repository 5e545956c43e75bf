"""The worker-call service against loopback providers reached through the real client: retries with
backoff and Retry-After, failover, a ledger row per failed attempt, and worker health (a failed worker cools
down, is skipped, is probed with one attempt after its cool-down, and a pool that is all cooling fails fast
without a request). Time for the cool-downs is a clock the test moves; the HTTP, the store and the client are
real."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from fugu_cli.calls import (
    AllFailed,
    Call,
    Exclusions,
    HealthSettings,
    RetryPolicy,
    Try,
    WorkerCall,
    WorkerHealth,
)
from fugu_cli.errors import Interrupted
from fugu_cli.ledger import Ledger, TurnLedger
from fugu_cli.llm.client import ClientConfig, LiteLLMClient
from fugu_cli.router.prior import PriorRouter
from fugu_cli.store import Store
from fugu_cli.types import Completion, Message, RouteDecision, RouteState, Worker
from tests.loopback import LoopbackServer

TASK = [Message("user", "hi")]
NO_WAIT = RetryPolicy(max_retries=2, backoff_base_s=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def pool(server: LoopbackServer) -> list[Worker]:
    return [
        Worker("dead", "openai/dead", api_base=server.base_url, priority=2),
        Worker("live", "openai/live", api_base=server.base_url, priority=1),
    ]


def ledger(tmp_path: Path) -> TurnLedger:
    store = Store(tmp_path / "fugu.db")
    store.create_session("s1", str(tmp_path), "fugu", "[]", "prior")
    return Ledger(store, "s1").turn(1)


def call(workers: list[Worker], rows: TurnLedger | None = None, step: int = 1) -> Call[Completion]:
    client = LiteLLMClient(ClientConfig(timeout_s=5.0))

    def route(ex: Exclusions) -> RouteDecision:
        state = RouteState(messages=TASK, step=step, excluded=ex.names, failover=ex.failover)
        return PriorRouter().pick(state, [w for w in workers if w.name not in ex.names])

    def send(attempt: Try) -> Completion:
        return client.complete(attempt.worker, TASK, [])

    return Call(pool=workers, route=route, send=send, ledger=rows, step=step)


def posts(server: LoopbackServer, model: str) -> int:
    return len(server.requests_for(model))


def test_a_dead_worker_cools_down_is_skipped_then_probed_once(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    clock = Clock()
    health = WorkerHealth(HealthSettings(cooldown_s=30.0), clock=clock)
    calls = WorkerCall(health, NO_WAIT)
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 503}] * 4)
    loopback.script("live", ["one", "two", "three"])

    first = calls.run(call(workers, ledger(tmp_path)))
    assert first.value.message.content == "one" and first.failed == ("dead",)
    assert posts(loopback, "dead") == 3  # its attempts: the first and two retries

    second = calls.run(call(workers))  # within the cool-down: not asked at all
    assert second.value.message.content == "two" and posts(loopback, "dead") == 3
    assert "dead cooling down 30 s more after 1 failed call" in second.decision.reason

    clock.now += 31  # the cool-down is over: one attempt (a probe), no retries, then the next cool-down
    third = calls.run(call(workers))
    assert third.value.message.content == "three" and posts(loopback, "dead") == 4
    condition = health.condition(workers[0])
    assert condition is not None and condition.failures == 2 and condition.left_s(clock.now) == 60

    clock.now += 61
    loopback.script("dead", ["back again"])
    fourth = calls.run(call(workers))
    assert fourth.worker.name == "dead" and "probed after its cool-down" in fourth.decision.reason
    assert health.condition(workers[0]) is None  # healthy again


def test_every_failed_attempt_is_a_ledger_row_of_the_step(tmp_path: Path, loopback: LoopbackServer) -> None:
    calls = WorkerCall(WorkerHealth(HealthSettings(cooldown_s=0)), NO_WAIT)
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 500}, {"fault": 429}, {"fault": 503}])
    loopback.script("live", ["fine"])
    rows = ledger(tmp_path)
    answer = calls.run(call(workers, rows, step=4))  # the answered attempt's row is the caller's to write
    steps = rows.ledger.store.query("SELECT step, status, text FROM steps ORDER BY rowid")
    assert [(r["step"], r["status"]) for r in steps] == [(4, "provider_error")] * 3
    assert "after 3 attempts" in steps[-1]["text"] and answer.worker.name == "live"
    routes = rows.ledger.store.query("SELECT worker, source FROM route_decisions ORDER BY rowid")
    assert [r["worker"] for r in routes] == ["dead", "live"]


def test_a_pool_that_is_all_cooling_down_fails_fast_and_says_when(loopback: LoopbackServer) -> None:
    clock = Clock()
    health = WorkerHealth(HealthSettings(cooldown_s=30.0), clock=clock)
    calls = WorkerCall(health, RetryPolicy(max_retries=0))
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 503}])
    loopback.script("live", [{"fault": 502}])
    with pytest.raises(AllFailed) as failed:
        calls.run(call(workers))
    assert len(failed.value.failures) == 2
    sent = len(loopback.requests)
    clock.now += 10
    with pytest.raises(AllFailed) as fast:
        calls.run(call(workers))
    assert len(loopback.requests) == sent  # nothing was sent
    assert not fast.value.failures and set(fast.value.cooling) == {"dead", "live"}
    assert fast.value.retry_after_s == 20 and "nothing was sent" in str(fast.value)


def test_retry_after_is_honoured_between_attempts_and_floors_the_cool_down(loopback: LoopbackServer) -> None:
    clock = Clock()
    health = WorkerHealth(HealthSettings(cooldown_s=5.0, cooldown_max_s=600.0), clock=clock)
    calls = WorkerCall(health, RetryPolicy(max_retries=1, backoff_base_s=0.0))
    [worker] = pool(loopback)[:1]
    loopback.script("dead", [{"fault": 429, "retry_after": 0.3}, {"fault": 429, "retry_after": 120}])
    told: list[tuple[int, str, float, int]] = []
    retrying = lambda t, e, delay, n: told.append((t.number, str(e), delay, n))  # noqa: E731
    with pytest.raises(AllFailed):
        calls.run(dataclasses.replace(call([worker]), retrying=retrying))
    # the caller is told of the wait before it (the REPL and -p print it): once, not after the last attempt
    assert told == [(1, "worker dead (openai/dead): rate limited (429)", 0.3, 2)]
    first, second = loopback.requests_for("dead")
    assert second.arrived - (first.finished or 0) >= 0.25  # the first Retry-After, waited out
    condition = health.condition(worker)
    assert condition is not None and condition.left_s(clock.now) == 120  # the provider asked for 120 s


def test_a_refused_request_fails_over_but_does_not_cool_the_worker(loopback: LoopbackServer) -> None:
    health = WorkerHealth(HealthSettings(cooldown_s=30.0))
    calls = WorkerCall(health, NO_WAIT)
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 400, "code": "context_length_exceeded", "message": "too long"}])
    loopback.script("live", ["fine"])
    answer = calls.run(call(workers))
    assert answer.worker.name == "live" and posts(loopback, "dead") == 1  # a refusal is not retried
    assert health.report(workers) == {}


def test_cancel_during_backoff_stops_the_call_at_once(loopback: LoopbackServer) -> None:
    calls = WorkerCall(WorkerHealth(), RetryPolicy(max_retries=3, backoff_base_s=5.0))
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 503}] * 4)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    spec = call(workers)
    start = time.monotonic()
    with pytest.raises(Interrupted):
        calls.run(Call(pool=spec.pool, route=spec.route, send=spec.send, cancel=cancel))
    assert time.monotonic() - start < 3.0 and posts(loopback, "dead") == 1
    assert calls.health.report(workers) == {}  # an interrupt is nobody's failure


def test_health_is_kept_in_a_file_that_another_process_reads(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    path = tmp_path / "health.json"
    clock = Clock()
    mine = WorkerHealth(HealthSettings(cooldown_s=30.0), path, clock)
    calls = WorkerCall(mine, RetryPolicy(max_retries=0))
    workers = pool(loopback)
    loopback.script("dead", [{"fault": 503}])
    loopback.script("live", ["fine"])
    calls.run(call(workers))
    theirs = WorkerHealth(HealthSettings(cooldown_s=30.0), path, clock)
    assert set(theirs.cooling(workers)) == {"dead"}
    assert "server error 503" in theirs.report(workers)["dead"].error
    other_pool = Worker("dead", "openai/dead", api_base="http://127.0.0.1:9/v1")
    assert theirs.condition(other_pool) is None  # another endpoint's "dead" is another worker
    theirs.forget()
    assert mine.cooling(workers) == {}
