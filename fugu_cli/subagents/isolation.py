"""One agent in isolation: a transcript of its own (seeded with its instructions and its task) and a ledger
scope of its own, so nothing of another agent's conversation reaches its requests and every step and tool
call it makes is recorded under its scope. Ultra mode's workflow steps and the `task` tool's subagents both
run this way. Never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from fugu_cli.agent import Agent, AgentDeps, Limits, Picker, TurnIO
from fugu_cli.types import Message, RouteDecision, RouteState, TurnResult, Worker


def run_isolated(
    deps: AgentDeps,
    scope: str,
    turn: int,
    seed: Sequence[Message],
    pick: Picker,
    limits: Limits,
    io: TurnIO,
) -> TurnResult:
    """Run an agent on a fresh transcript `seed` under the ledger scope `scope` (the seed is recorded too)."""
    ledger = deps.ledger.sibling(scope)
    messages = list(seed)
    for message in messages:
        ledger.turn(turn).message(message)
    return Agent(dataclasses.replace(deps, ledger=ledger)).run(messages, turn, pick, limits, io)


def fixed_picker(worker: str, pool: Sequence[Worker], reason: str) -> Callable[[RouteState], RouteDecision]:
    """Always `worker`; after a provider failure the highest-priority worker that has not failed."""

    def pick(state: RouteState) -> RouteDecision:
        if worker not in state.excluded:
            return RouteDecision(worker, {worker: 1.0}, "override", 0.0, reason=reason)
        spare = sorted((w for w in pool if w.name not in state.excluded), key=lambda w: -w.priority)
        if not spare:
            raise LookupError("no worker left")
        return RouteDecision(spare[0].name, {spare[0].name: 1.0}, "fallback", 0.0, reason=f"{worker} failed")

    return pick
