"""Calling one worker the way fugu does (the worker-call service's retries around a client's single
attempts), for the tests of the clients underneath it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from fugu_cli.calls import AllFailed, Call, Exclusions, HealthSettings, RetryPolicy, WorkerCall, WorkerHealth
from fugu_cli.types import RouteDecision, Worker

T = TypeVar("T")
RETRY = RetryPolicy(max_retries=2, backoff_base_s=0.01)


def through_calls(
    worker: Worker,
    send: Callable[[Worker], T],
    retry: RetryPolicy = RETRY,
    cancel: threading.Event | None = None,
) -> T:
    """`send`'s value after the service's retries; the worker's own error when it gives up (no cool-down)."""
    calls = WorkerCall(WorkerHealth(HealthSettings(cooldown_s=0)), retry)

    def route(ex: Exclusions) -> RouteDecision:
        if ex.names:
            raise LookupError(worker.name)
        return RouteDecision(worker.name, {}, "override", 0.0)

    try:
        return calls.run(Call(pool=[worker], route=route, send=lambda t: send(t.worker), cancel=cancel)).value
    except AllFailed as e:
        raise e.failures[0] from None
