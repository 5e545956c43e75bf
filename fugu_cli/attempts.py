"""A turn made of attempts that evidence judges (`--check CMD`, `[checks] verify`).

A worker makes an attempt; when it ends, the check runs in the sandbox. A pass ends the turn. On a failure
the attempt's changes are set aside (snapshotted under a git ref, the tree restored to the turn's
checkpoint), the failure goes into the transcript, and the escalation names the next worker, until the check
passes, the turn's limits (money, steps, time) are spent, or the escalation stops. Without a check, the last
test command a worker ran itself is its attempt's evidence: recorded and shown, never acted on.

Used by the session only; the session supplies how an attempt runs and who makes the next one. Never prints:
it emits AttemptStarted, AttemptChecked and Notices.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.agent import Limits, Picker, TurnIO
from fugu_cli.events import AttemptChecked, AttemptStarted
from fugu_cli.ledger import ToolCallRow, TurnLedger
from fugu_cli.prompts import load
from fugu_cli.router import Router
from fugu_cli.router.prior import attempt_reason
from fugu_cli.tools.sandbox import SandboxPolicy
from fugu_cli.tools.verify import NOT_FOUND, Verdict, run_check, worker_test
from fugu_cli.turn_settings import Check
from fugu_cli.types import (
    Attempt,
    AttemptRecord,
    Evidence,
    Message,
    RouteDecision,
    RouteState,
    Stop,
    TurnResult,
    TurnStatus,
    Usage,
    Worker,
    add_workers,
)

log = logging.getLogger("fugu")
Runner = Callable[[RouteDecision, int, Limits], TurnResult]  # (the attempt's worker, its number, limits)
Escalation = Callable[[Sequence[AttemptRecord]], "RouteDecision | str"]  # the next worker, or why none


def own_test_evidence(result: TurnResult, calls: Sequence[ToolCallRow]) -> AttemptRecord | None:
    """The attempt record a turn without a check gets from the worker's own last test run (None: none)."""
    row = worker_test(calls)
    if row is None:
        return None
    command = str(json.loads(row.arguments or "{}").get("command", ""))
    return AttemptRecord(
        worker=row.agent,
        cost_usd=result.usage.cost_usd,
        steps=result.num_turns,
        check="passed" if row.exit_code == 0 else "failed",
        evidence="worker-test",
        command=command,
        exit_code=row.exit_code,
        status=result.status,
    )


# --- attempts judged by a check ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptsDeps:
    """What the session gives a turn of attempts."""

    check: Check
    root: Path
    sandbox: SandboxPolicy
    session_id: str
    turn: int
    ledger: TurnLedger
    limits: Limits
    io: TurnIO
    attempt: Runner
    escalate: Escalation
    checkpoint: Callable[[], str | None]  # the turn's: None before any change, "" when none could be made
    record: Callable[[Message], None]  # add to the transcript (and the store)


class Attempts:
    """One turn's attempts, in order, and the results of their runs."""

    def __init__(self, deps: AttemptsDeps) -> None:
        self.d = deps
        self.records: list[AttemptRecord] = []
        self.results: list[TurnResult] = []
        self.started = time.monotonic()

    def run(self) -> TurnResult:
        d = self.d
        while True:
            limits, stop = self._left()
            if stop is not None:
                return self._end(*stop)
            chosen = d.escalate(tuple(self.records))
            if isinstance(chosen, str):
                return self._end("error_during_execution", self._gave_up(chosen))
            number = len(self.records) + 1
            d.io.emit(
                AttemptStarted(
                    session_id=d.session_id, attempt=number, worker=chosen.worker, reason=chosen.reason
                )
            )
            result = d.attempt(chosen, number, limits)
            self.results.append(result)
            worker = _main_worker(result, chosen.worker)
            if result.status == "interrupted":
                self._keep(
                    number,
                    AttemptRecord(worker, result.usage.cost_usd, result.num_turns, status="interrupted"),
                )
                return self._end("interrupted", result.error or "interrupted by the user")
            verdict = run_check(d.check.command, d.check.timeout_s, d.root, d.sandbox, d.io.cancel)
            if verdict.cancelled:
                self._keep(number, self._record(worker, result, verdict, "not run"))
                return self._end("interrupted", "interrupted by the user while the check ran")
            if verdict.exit_code in NOT_FOUND:
                self._keep(number, self._record(worker, result, verdict, "not run"), verdict.output)
                return self._end("error_during_execution", self._broken(verdict))
            if verdict.passed:
                self._keep(number, self._record(worker, result, verdict, "passed"), verdict.output)
                return self._end(result.status, result.error, text=result.result)
            ref, trouble = self._set_aside(number, worker)
            self._keep(number, self._record(worker, result, verdict, "failed", ref), verdict.output)
            if trouble:
                return self._end(
                    "error_during_execution", f"the check failed on {worker}'s attempt; {trouble}"
                )
            d.record(Message(role="user", content=self._evidence(worker, verdict, ref)))
            if result.status != "success":
                return self._end(result.status, f"{result.error or result.status}; {self._failures()}")

    def _left(self) -> tuple[Limits, tuple[TurnStatus, str] | None]:
        """What the next attempt may spend, or why none may start."""
        lim, done = self.d.limits, self.results
        if not done:
            return lim, None
        spent = sum(r.usage.cost_usd for r in done)
        steps = sum(r.num_turns for r in done)
        elapsed = time.monotonic() - self.started
        tried = f"after {len(done)} attempt{'s' if len(done) != 1 else ''}; {self._failures()}"
        if lim.max_budget_usd is not None and spent >= lim.max_budget_usd:
            return lim, ("error_max_budget", f"stopped at the budget limit (${lim.max_budget_usd}) {tried}")
        if steps >= lim.max_steps:
            return lim, ("error_max_turns", f"stopped at the step limit ({lim.max_steps}) {tried}")
        if lim.timeout_s is not None and elapsed >= lim.timeout_s:
            return lim, ("error_during_execution", f"stopped at the time limit ({lim.timeout_s} s) {tried}")
        return (
            Limits(
                max_steps=lim.max_steps - steps,
                max_budget_usd=None if lim.max_budget_usd is None else lim.max_budget_usd - spent,
                timeout_s=None if lim.timeout_s is None else lim.timeout_s - elapsed,
            ),
            None,
        )

    def _record(
        self, worker: str, result: TurnResult, verdict: Verdict, check: str, ref: str | None = None
    ) -> AttemptRecord:
        return AttemptRecord(
            worker=worker,
            cost_usd=result.usage.cost_usd,
            steps=result.num_turns,
            check=check,  # type: ignore[arg-type]
            evidence="check",
            command=self.d.check.command,
            exit_code=verdict.exit_code,
            set_aside=ref,
            status=result.status,
        )

    def _keep(self, number: int, record: AttemptRecord, output: str = "") -> None:
        self.records.append(record)
        self.d.ledger.attempt(number, record, output)
        self.d.io.emit(
            AttemptChecked(session_id=self.d.session_id, attempt=number, record=record, output=output)
        )

    def _set_aside(self, number: int, worker: str) -> tuple[str | None, str]:
        """Snapshot the failed attempt's tree under a ref and restore the turn's checkpoint. Returns the ref
        (None when the tree is as the turn found it) and, when it could not be done, why."""
        sha = self.d.checkpoint()
        if sha is None:
            return None, ""
        if not sha:
            return (
                None,
                "its changes could not be set aside: this turn has no checkpoint (is this a git repository?)",
            )
        from fugu_cli.tools import checkpoints, git

        label = f"{self.d.session_id}-t{self.d.turn}-attempt{number}-{_ref_word(worker)}"
        try:
            if not checkpoints.differs(self.d.root, sha):  # the turn's checkpoint lives in fugu's store
                return None, ""
            git.checkpoint(self.d.root, label)  # the failed attempt: in the repository, for the user to read
            checkpoints.restore(self.d.root, sha)
        except Exception as e:
            return None, f"its changes could not be set aside: {e}"
        return git.CHECKPOINT_REF + label, ""

    def _evidence(self, worker: str, verdict: Verdict, ref: str | None) -> str:
        aside = (
            f"Its changes were set aside (git ref {ref}) and the working tree is back as it was when this "
            "turn began"
            if ref
            else "It changed no files"
        )
        return load("check_failed").format(
            command=self.d.check.command, worker=worker, why=verdict.why(), aside=aside, output=verdict.output
        )

    def _failures(self) -> str:
        failed = [r.worker for r in self.records if r.check == "failed"]
        if not failed:
            return "no attempt failed the check"
        return f"the check failed on {', '.join(failed)}"

    def _gave_up(self, why: str) -> str:
        return f"no attempt passed the check `{self.d.check.command}`: {self._failures()}; {why}"

    def _broken(self, verdict: Verdict) -> str:
        said = verdict.output.strip().splitlines()
        return (
            f"the check `{self.d.check.command}` could not run ({verdict.why()}: "
            f"{said[-1] if said else 'command not found'}); the attempt's changes are left in the tree, "
            "unjudged"
        )

    def _end(self, status: TurnStatus, error: str | None, *, text: str | None = None) -> TurnResult:
        results = self.results
        last = results[-1] if results else None
        success = status == "success"
        return TurnResult(
            status=status,
            result=(text or "") if success else (error or status),
            session_id=self.d.session_id,
            num_turns=sum(r.num_turns for r in results),
            usage=sum((r.usage for r in results), Usage()),
            workers=add_workers(*(r.workers for r in results)),
            denied=tuple(x for r in results for x in r.denied),
            error=None if success else (error or status),
            stop_reason=last.stop_reason if last else None,
            attempts=tuple(self.records),
        )


def escalation(
    router: Router,
    fallback: Router,
    pool: Sequence[Worker],
    transcript: Callable[[], Sequence[Message]],
    settings: tuple[str | None, float | None],
    warn: Callable[[str], None],
) -> Escalation:
    """Who makes the next attempt: the forced worker first (`settings`: the forced worker and the turn's
    budget), then the router's escalation policy reading the attempts so far (`Router.escalate`: the prior
    takes the highest-priority worker that made no attempt at this turn; the learned router its policy);
    why nobody, when it stops."""
    forced, budget = settings

    def next_attempt(records: Sequence[AttemptRecord]) -> RouteDecision | str:
        state = RouteState(
            messages=tuple(transcript()),
            step=sum(r.steps for r in records) + 1,
            evidence=evidence(records, budget),
        )
        if not records and forced:
            return RouteDecision(
                forced, {}, "override", 0.0, reason=attempt_reason(state, "forced by the user")
            )
        try:
            answer = router.escalate(state, pool)
        except Exception as e:  # a broken router must not end the turn: the prior takes over
            log.warning("router failed", exc_info=e)
            warn(f"router failed ({e}); using the prior")
            answer = fallback.escalate(state, pool)
        if isinstance(answer, Stop):
            return answer.reason
        if answer.worker in state.tried:  # the protocol forbids it; never loop on a broken router
            return f"the router chose {answer.worker} again, which already made an attempt at this turn"
        return answer

    return next_attempt


def evidence(records: Sequence[AttemptRecord], budget: float | None) -> Evidence:
    """What the routers read of this turn's attempts (`RouteState.evidence`)."""
    attempts = tuple(Attempt(r.worker, r.cost_usd, r.passed) for r in records)
    return Evidence(attempts, checked=True, budget_usd=budget)


def attempt_picker(base: Picker, decision: RouteDecision, number: int, known: Evidence) -> Picker:
    """Every step of an attempt goes to its worker (`base`, the session's picker, takes over only when that
    worker failed or cannot hold the transcript, and never hands a step to a worker that failed the check:
    it reads `known`); the first step's route line says why this worker."""
    first = [True]

    def pick(state: RouteState) -> RouteDecision:
        if decision.worker in state.excluded or state.failover:
            return base(dataclasses.replace(state, evidence=known))
        if first[0]:
            first[0] = False
            return decision
        return dataclasses.replace(decision, latency_ms=0.0, reason=f"attempt {number} by {decision.worker}")

    return pick


def _main_worker(result: TurnResult, chosen: str) -> str:
    """The worker an attempt is counted for: the chosen one, unless it took no step (it failed over)."""
    if chosen in result.workers or not result.workers:
        return chosen
    return max(result.workers.items(), key=lambda kv: kv[1].steps)[0]


def _ref_word(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip(".-") or "worker"
