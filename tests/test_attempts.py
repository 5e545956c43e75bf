"""The parts of a checked turn that need no worker: the evidence a worker's own test runs give, who
makes the next attempt (the routers' escalation, the forced worker, the budget), and who takes an
attempt's steps."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from fugu_cli.attempts import attempt_picker, escalation, evidence, own_test_evidence
from fugu_cli.router.prior import PriorRouter
from fugu_cli.store import ToolCallRow
from fugu_cli.tools.verify import worker_test
from fugu_cli.types import (
    AttemptRecord,
    Message,
    RouteDecision,
    RouteState,
    Stop,
    TurnResult,
    Usage,
    Worker,
)


def _row(command: str, exit_code: int | None, *, denied: bool = False, error: bool = False) -> ToolCallRow:
    args = json.dumps({"command": command})
    return ToolCallRow(1, 1, "cheap", "c1", "shell", args, "", error, denied, exit_code, 1.0, ())


def test_the_last_real_test_run_is_the_evidence() -> None:
    rows = [
        _row("pytest -q", 1),
        _row("pytest -q", 0),
        _row("ls", 0),
        _row("pytest -q", None, denied=True),
        _row("pytest -q", 124, error=True),  # killed by its timeout: it says nothing of the tests
    ]
    assert worker_test(rows) is rows[1]
    result = TurnResult("success", "ok", "s", 3, Usage(cost_usd=0.25))
    record = own_test_evidence(result, rows)
    assert record == AttemptRecord("cheap", 0.25, 3, "passed", "worker-test", "pytest -q", 0, None, "success")
    assert own_test_evidence(result, [_row("ls", 0)]) is None
    assert AttemptRecord("a", 0.0, 1, "failed").passed is False and AttemptRecord("a", 0.0, 1).passed is None


def _pool() -> tuple[Worker, ...]:
    return (
        Worker("strong", "openai/strong", priority=1.0, description="a large careful model"),
        Worker("cheap", "openai/cheap", priority=2.0, description="a small fast model"),
        Worker("mid", "openai/mid", priority=1.5, description="a middling model"),
    )


class _Broken:
    name = "broken"

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        raise RuntimeError("no checkpoint")

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        raise RuntimeError("no checkpoint")


def _failed(worker: str, cost: float = 0.01) -> AttemptRecord:
    return AttemptRecord(worker, cost, 2, "failed", "check")


def test_the_prior_escalates_by_priority_among_the_workers_that_have_not_tried() -> None:
    said: list[str] = []
    message = [Message(role="user", content="fix add()")]
    nxt = escalation(PriorRouter(), PriorRouter(), _pool(), lambda: message, (None, None), said.append)
    first = nxt([])
    assert isinstance(first, RouteDecision) and first.worker == "cheap" and first.source == "prior"
    assert first.reason.startswith("first attempt")
    second = nxt([_failed("cheap")])
    assert isinstance(second, RouteDecision) and second.worker == "mid"
    assert second.reason.startswith("escalates after cheap failed the check")
    third = nxt([_failed("cheap"), _failed("mid")])
    assert isinstance(third, RouteDecision) and third.worker == "strong"
    assert "cheap, mid failed the check" in third.reason
    assert "every worker" in str(nxt([_failed("cheap"), _failed("mid"), _failed("strong")]))
    assert said == []


def test_the_forced_worker_goes_first_and_a_broken_router_falls_back_to_the_prior() -> None:
    said: list[str] = []
    nxt = escalation(_Broken(), PriorRouter(), _pool(), lambda: [], ("strong", None), said.append)
    first = nxt([])
    assert isinstance(first, RouteDecision) and (first.worker, first.source) == ("strong", "override")
    second = nxt([_failed("strong")])
    assert isinstance(second, RouteDecision) and second.worker == "cheap"
    assert said == ["router failed (no checkpoint); using the prior"]


def test_the_budget_stops_the_escalation() -> None:
    nxt = escalation(PriorRouter(), PriorRouter(), _pool(), lambda: [], (None, 0.05), lambda _: None)
    assert isinstance(nxt([_failed("cheap", 0.01)]), RouteDecision)
    stop = nxt([_failed("cheap", 0.03), _failed("mid", 0.03)])
    assert isinstance(stop, str) and "budget" in stop


def test_an_attempt_keeps_its_worker_and_a_failover_skips_the_workers_that_failed_the_check() -> None:
    decision = RouteDecision("mid", {}, "prior", 3.0, reason="escalates after cheap failed the check")
    asked: list[RouteState] = []

    def base(state: RouteState) -> RouteDecision:
        asked.append(state)
        return PriorRouter().pick(state, _pool())

    known = evidence([_failed("cheap")], None)
    pick = attempt_picker(base, decision, 2, known)
    state = RouteState(messages=(), step=3)
    assert pick(state) == decision
    later = pick(state)
    assert later.worker == "mid" and later.reason == "attempt 2 by mid" and asked == []
    # mid fails over: the router picks among the rest, never cheap, which failed the check
    over = pick(dataclasses.replace(state, excluded=frozenset({"mid"}), failover=True))
    assert over.worker == "strong" and asked[0].evidence == known
