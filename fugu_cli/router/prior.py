"""The prior router: configured priority first, then how well a worker's description matches the task.
Escalating after a failed check, it takes the highest-priority worker that has made no attempt this turn.

Used until a learned checkpoint is configured, and as the fallback when a checkpoint can't serve the pool.
Pure Python: no torch.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from fugu_cli.types import RouteDecision, RouteState, Stop, Worker

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by for from good in is it of on or the to with this that you your".split()
)


def _bag(text: str) -> Counter[str]:
    return Counter(w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1)


def similarity(a: str, b: str) -> float:
    """Cosine similarity of word counts, in [0, 1]."""
    x, y = _bag(a), _bag(b)
    dot = sum(x[w] * y[w] for w in x.keys() & y.keys())
    if not dot:
        return 0.0
    return dot / math.sqrt(sum(v * v for v in x.values()) * sum(v * v for v in y.values()))


def softmax(scores: dict[str, float]) -> dict[str, float]:
    live = {k: v for k, v in scores.items() if v != -math.inf}
    if not live:
        return {k: 0.0 for k in scores}
    top = max(live.values())
    exp = {k: math.exp(v - top) for k, v in live.items()}
    total = sum(exp.values())
    return {k: exp.get(k, 0.0) / total for k in scores}


class PriorRouter:
    """Score = priority + description similarity to the task (similarity only breaks near-ties)."""

    name = "prior"

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        start = time.perf_counter()
        task = state.task
        raw: dict[str, float] = {}
        barred = state.barred([w.name for w in pool])
        for w in pool:
            if w.name in barred:
                raw[w.name] = -math.inf
            else:
                raw[w.name] = w.priority + similarity(task, f"{w.name} {w.description}")
        probs = softmax(raw)
        live = [w.name for w in pool if raw[w.name] != -math.inf]
        if not live:
            raise LookupError("every worker in the pool is excluded")
        best = max(live, key=lambda n: (raw[n], -[w.name for w in pool].index(n)))
        w = next(w for w in pool if w.name == best)
        reason = f"priority {w.priority:g}, description match {raw[best] - w.priority:.2f}"
        return RouteDecision(
            worker=best,
            scores=probs,
            source="prior",
            latency_ms=(time.perf_counter() - start) * 1000,
            reason=reason,
        )

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        """The highest-priority worker that has made no attempt this turn (description match breaks
        near-ties, as in `pick`); Stop once the check passed, the limits are reached or none is left."""
        why = stop_reason(state, pool)
        if why:
            return Stop(why)
        decision = self.pick(replace(state, excluded=state.excluded | state.tried), pool)
        return replace(decision, reason=attempt_reason(state, decision.reason))


def stop_reason(state: RouteState, pool: Sequence[Worker]) -> str:
    """Why no further attempt starts whatever the router thinks ("" when one may)."""
    ev = state.evidence
    if ev.attempts and ev.attempts[-1].passed:
        return f"the check passed on {ev.attempts[-1].worker}'s attempt"
    if ev.exhausted:
        return ev.exhausted
    if all(w.name in state.excluded or w.name in state.tried for w in pool):
        return "every worker in the pool made an attempt this turn (or is unavailable)"
    return ""


def attempt_reason(state: RouteState, why: str) -> str:
    """The route line's reason for an attempt: the first, or an escalation after failed checks."""
    failed = [a.worker for a in state.evidence.attempts if a.passed is False]
    if not failed:
        return f"first attempt: {why}"
    return f"escalates after {', '.join(failed)} failed the check: {why}"
