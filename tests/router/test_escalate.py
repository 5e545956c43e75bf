"""`Router.escalate`, the interface sessions drive attempts and checks through (`fugu_cli.router`): the prior
takes the highest-priority worker that has made no attempt this turn; the learned router its checkpoint's
escalation policy (a cheap first attempt where a failure would be caught, the strong worker after it fails,
a stop where nothing is worth its cost), in-process and across the pipe alike; both stop after a passed check,
at the budget and at the attempt limit, and `pick` never hands a step back to a worker that failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fugu_cli.router.checkpoint import init_checkpoint
from fugu_cli.router.learned import LearnedRouter
from fugu_cli.router.prior import PriorRouter
from fugu_cli.router.remote import RouterProcess
from fugu_cli.types import Attempt, Evidence, Message, RouteDecision, RouteState, Stop, Worker

CHEAP = Worker("cheap", "x/cheap", price_in=0.1, price_out=0.1)
STRONG = Worker("strong", "x/strong", price_in=10.0, price_out=30.0, priority=1.0)
MID = Worker("mid", "x/mid", priority=0.5)
TASK = [Message(role="user", content="fix the failing test in calc.py")]


def state(*attempts: Attempt, **limits: object) -> RouteState:
    evidence = Evidence(attempts=attempts, checked=True, **limits)  # type: ignore[arg-type]
    return RouteState(messages=TASK, step=0, evidence=evidence)


def worker(answer: RouteDecision | Stop) -> str:
    assert isinstance(answer, RouteDecision), answer
    return answer.worker


def test_the_prior_escalates_by_priority_to_workers_that_have_not_tried() -> None:
    prior, pool = PriorRouter(), [CHEAP, STRONG, MID]
    first = prior.escalate(state(), pool)
    assert worker(first) == "strong" and "first attempt" in first.reason  # type: ignore[union-attr]
    second = prior.escalate(state(Attempt("strong", 0.5, False)), pool)
    assert worker(second) == "mid" and "strong failed the check" in second.reason  # type: ignore[union-attr]
    assert (
        worker(prior.escalate(state(Attempt("strong", 0.5, False), Attempt("mid", 0.1, False)), pool))
        == "cheap"
    )
    tried = state(Attempt("strong", 0.5, False), Attempt("mid", 0.1, False), Attempt("cheap", 0.0, False))
    assert isinstance(prior.escalate(tried, pool), Stop)
    passed = prior.escalate(state(Attempt("strong", 0.5, True)), pool)
    assert isinstance(passed, Stop) and "passed" in passed.reason
    broke = prior.escalate(state(Attempt("strong", 0.5, False), budget_usd=0.5), pool)
    assert isinstance(broke, Stop) and "budget" in broke.reason
    limit = prior.escalate(state(Attempt("strong", 0.5, False), max_attempts=1), pool)
    assert isinstance(limit, Stop) and "at most 1" in limit.reason
    # a step of the next attempt never goes back to the worker that failed (unless no other is left)
    assert prior.pick(state(Attempt("strong", 0.5, False)), pool).worker == "mid"
    assert prior.pick(state(Attempt("strong", 0.5, False)), [STRONG]).worker == "strong"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two known workers and a hand-set escalation policy: cheap right half the time, strong 9 times in
    10; after a failed check each is worth less (the task is likelier hard)."""
    out = tmp_path_factory.mktemp("ckpt") / "esc"
    init_checkpoint(out, [CHEAP, STRONG], rank=2)
    meta = json.loads((out / "router.json").read_text())
    meta["escalation"] = {
        "value": [[0.5, 0.9], [0.3, 0.75], [0.2, 0.6]],
        "text": [0.0, 0.0, 0.0],
        "stop": [0.0, 0.0],
        "fail": 0.0,
        "spend": 0.0,
        "look": 1.0,
        "strength": [0.5, 0.9],
        "check_accuracy": 0.9,
    }
    (out / "router.json").write_text(json.dumps(meta))
    return out


def test_the_learned_policy_tries_cheap_first_escalates_and_stops_where_nothing_pays(
    checkpoint: Path,
) -> None:
    pool = [CHEAP, STRONG]
    router = LearnedRouter.load(checkpoint, cost_weight=10.0)  # a strong attempt's dollars weigh ~0.3
    first = router.escalate(state(), pool)
    assert worker(first) == "cheap" and first.source == "learned"  # type: ignore[union-attr]
    after = router.escalate(state(Attempt("cheap", 0.001, False)), pool)
    assert worker(after) == "strong" and "cheap failed the check" in after.reason  # type: ignore[union-attr]
    assert isinstance(router.escalate(state(Attempt("cheap", 0.001, True)), pool), Stop)
    both = state(Attempt("cheap", 0.001, False), Attempt("strong", 0.03, False))
    assert isinstance(router.escalate(both, pool), Stop)
    dear = LearnedRouter.load(checkpoint, cost_weight=100.0)  # now the strong attempt is worth −2.5
    stop = dear.escalate(state(Attempt("cheap", 0.001, False)), pool)
    assert isinstance(stop, Stop) and "worth its cost" in stop.reason
    free = LearnedRouter.load(checkpoint, cost_weight=0.0)  # cost is no object: the strong one first
    assert worker(free.escalate(state(), pool)) == "strong"
    assert router.pick(state(Attempt("cheap", 0.001, False)), pool).worker == "strong"


def test_escalation_across_the_pipe_is_the_in_process_one(checkpoint: Path) -> None:
    pool = [CHEAP, STRONG]
    local = LearnedRouter.load(checkpoint, cost_weight=10.0)
    remote = RouterProcess(checkpoint, 10.0)
    try:
        for s in (state(), state(Attempt("cheap", 0.001, False)), state(Attempt("cheap", 0.001, True))):
            got, want = remote.escalate(s, pool), local.escalate(s, pool)
            assert type(got) is type(want)
            if isinstance(got, RouteDecision) and isinstance(want, RouteDecision):
                assert (got.worker, got.reason) == (want.worker, want.reason)
            assert got.scores == pytest.approx(want.scores)
        assert remote.pick(state(Attempt("cheap", 0.001, False)), pool).worker == "strong"
    finally:
        remote.close()
