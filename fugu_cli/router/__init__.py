"""Routers pick the worker for the next step, and for the next attempt when a check judges each attempt.
`Router` is the seam; heavy routers load torch lazily.

Attempts and checks (how a session drives `escalate`): with a check, the session sets
`RouteState.evidence = Evidence(attempts, checked=True, budget_usd, max_attempts)`. Before the first
attempt it calls `escalate` (no attempts yet: it names the first attempt's worker, and stops only when no
worker is left); after each attempt it runs the check and appends `Attempt(worker, cost_usd, passed)`. A
passed check ends the turn; after a failed one it calls `escalate` again: a `RouteDecision` names the next
attempt's worker (never one that made an attempt this turn), a `Stop` says why none is worth it (a budget,
`max_attempts`, every worker tried, or the learned policy's stop rule). The session (fugu_cli/attempts.py)
keeps every step of an attempt on its worker; `pick` is asked only when that worker fails over or cannot
hold the transcript, and never hands a step to a worker that failed the check this turn
(`RouteState.barred`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fugu_cli.types import RouteDecision, RouteState, Stop, Worker


class Router(Protocol):
    name: str

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        """Score every worker in `pool` (all of them, for the record) and choose one not in
        `state.barred(...)`. Must not raise for an ordinary transcript."""
        ...

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        """The worker for this turn's next attempt, read from `state.evidence` (see the module docstring),
        or `Stop` and why. Never a worker in `state.excluded` or one that made an attempt this turn."""
        ...
