"""The escalation policy: which worker makes a turn's first attempt and, after a check fails, which worker
makes the next one or whether to stop, from the evidence (the attempts so far: their workers, the checks'
verdicts, the money spent) beside the text; its supervised start, and its form as a replay policy. Pure numpy;
never prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fugu_cli.router.calibrate import col_mean, shrink_at
from fugu_cli.router.replay import Batch

EPS_USD = 1e-6  # keeps overrun finite where nothing costs anything


@dataclass(frozen=True, eq=False)
class Features:
    """One decision for N episodes (or one session) with W candidate workers."""

    k: int  # attempts made so far
    dev: np.ndarray  # [N, W] the text's per-prompt deviation (0: no text)
    shrink: np.ndarray  # [W] s_j(λ), or [N, W] (one λ per row)
    cost: np.ndarray  # [W] USD an attempt by j is expected to cost
    lam: float | np.ndarray  # λ, or [N] one per row (a whole sweep played as one batch)
    allowed: np.ndarray  # [N, W] may make the next attempt (no attempt yet, not excluded)
    strongest: np.ndarray  # [N] the strongest worker that failed the check (0 before any)
    overrun: np.ndarray  # [N] log(spent / expected spent) of the attempts made (0 before any)
    last_passed: np.ndarray  # [N] the last attempt passed its check
    last: np.ndarray  # [N] the column of the last attempt's worker (−1: none, or not in the pool)
    limit: int  # attempts allowed in all: no lookahead past it


@dataclass(frozen=True, eq=False)
class EscalationPolicy:
    """With k attempts made (rows of `value` past the last repeat it), worker j scores

        a_k(j)     = value[k, j] + text[k]·s_j(λ)·dev_j − fail·strongest − spend·overrun − λ·cost_j
        score_k(j) = a_k(j) + look·P(the check fails j)·max(0, max_i a_k+1(i | j failed) − bar_k+1(j))
        bar_k(j)   = stop[k − 1] + P(j was right | its check failed)

    (i over the other workers with no attempt yet). value[k, j]: the reward an attempt by j is worth after k
    failed checks (λ-free); dev_j: the text's per-prompt deviation (`Decision.deviation`) and s_j(λ) the
    decision's shrink, so the text counts only where calibration trusted it; strongest: the highest training
    mean reward among the workers that failed the check (0 before any); overrun: log of the money spent over
    what the attempts made were expected to cost (a long failed run hints at a hard task); cost_j: USD an
    attempt by j is expected to cost; P(the check fails j) = (1 − v)·A + v·(1 − A), v the value clipped to
    [0, 1] and A the check accuracy it assumes. The lookahead prices in the option to escalate, so a cheap
    first attempt wins where its failure would be caught. The first attempt takes the best score (it never
    stops); after a failed check the best worker with no attempt yet makes the next one if its score clears
    the bar, else the turn stops and keeps the last attempt (worth the chance its check was wrong,
    v(1 − A) / (v(1 − A) + (1 − v)A), plus a learned margin stop[k − 1]); a passed check stops."""

    value: np.ndarray  # [K, W]
    text: np.ndarray  # [K]
    stop: np.ndarray  # [K − 1]
    fail: float
    spend: float
    look: float
    strength: np.ndarray  # [W] each worker's training mean reward (a fixed feature, not trained)
    check_accuracy: float = 0.9  # the verifier accuracy it was trained for

    @property
    def attempts(self) -> int:
        return int(self.value.shape[0])

    def vector(self) -> np.ndarray:
        """The parameters stage 2 searches: value, text, stop, fail, spend, look."""
        extra = [self.fail, self.spend, self.look]
        return np.concatenate([self.value.ravel(), self.text, self.stop, extra]).astype(np.float64)

    def with_vector(self, x: np.ndarray) -> EscalationPolicy:
        k, w = self.value.shape
        x = np.asarray(x, dtype=np.float64)
        if x.size != k * w + k + (k - 1) + 3:
            raise ValueError(f"an escalation vector has {k * w + 2 * k + 2} entries, not {x.size}")
        at = k * w
        value, text, stop = x[:at].reshape(k, w), x[at : at + k], x[at + k : at + 2 * k - 1]
        fail, spend, look = (float(v) for v in x[at + 2 * k - 1 :])
        return replace(self, value=value, text=text, stop=stop, fail=fail, spend=spend, look=look)

    def columns(self, known: np.ndarray) -> EscalationPolicy:
        """The policy over a pool's columns: `known` [W'] the index of each column's worker in this policy, −1
        for a worker it never saw (it gets the known workers' mean value and strength)."""
        known = np.asarray(known, dtype=np.int64)
        mean_v, mean_s = self.value.mean(axis=1, keepdims=True), float(self.strength.mean())
        cols = np.clip(known, 0, None)
        value = np.where(known[None, :] >= 0, self.value[:, cols], mean_v)
        strength = np.where(known >= 0, self.strength[cols], mean_s)
        return replace(self, value=value, strength=strength)

    def _stop(self, k: int) -> float:
        """The learned margin after k failed checks (k ≥ 1): past the last entry, the last one; none: always
        stop."""
        return float(self.stop[min(k, len(self.stop)) - 1]) if len(self.stop) else float("inf")

    def _wrong_fail(self, k: int) -> np.ndarray:
        """[W] P(an attempt by j at index k was right | its check failed), from its value."""
        v = np.clip(self.value[min(k, self.attempts - 1)], 0.0, 1.0)
        a = self.check_accuracy
        return np.asarray(v * (1 - a) / np.maximum(v * (1 - a) + (1 - v) * a, 1e-12))

    def bar(self, f: Features) -> np.ndarray:
        """[N] what the next attempt must score after k ≥ 1 failed checks: the margin plus the chance the last
        attempt (the answer if the turn stops) was right after all."""
        if f.k == 0:
            return np.full(len(f.dev), -np.inf)
        wrong = self._wrong_fail(f.k - 1)
        last = np.where(f.last >= 0, wrong[np.clip(f.last, 0, None)], float(wrong.mean()))
        return np.asarray(self._stop(f.k) + last)

    def _attempt_value(self, k: int, f: Features, fail_term: np.ndarray) -> np.ndarray:
        """[N, W] a_k(j)."""
        kk = min(k, self.attempts - 1)
        lam = np.asarray(f.lam, dtype=float).reshape(-1, 1)
        out = self.value[kk][None, :] - lam * f.cost[None, :] - (fail_term - self.spend * f.overrun[:, None])
        if self.text[kk] != 0.0 and f.shrink.any():  # the text is read only where a shrink trusts it
            shrink = f.shrink if f.shrink.ndim == 2 else f.shrink[None, :]
            out = out + self.text[kk] * shrink * f.dev
        return np.asarray(out)

    def scores(self, f: Features) -> np.ndarray:
        """[N, W] score_k(j); −inf where j may not make the next attempt."""
        now = self._attempt_value(f.k, f, self.fail * f.strongest[:, None])
        out = now
        if f.k + 1 < f.limit and self.look != 0.0:
            nxt = np.where(f.allowed, self._attempt_value(f.k + 1, f, np.zeros((len(f.dev), 1))), -np.inf)
            top = nxt.argmax(axis=1)[:, None]  # [N, 1]
            first = np.take_along_axis(nxt, top, axis=1)
            is_top = np.arange(nxt.shape[1])[None, :] == top
            second = np.where(is_top, -np.inf, nxt).max(axis=1, keepdims=True)
            others = np.where(is_top, second, first)  # [N, W] the best of the other workers
            if_failed = np.maximum(f.strongest[:, None], self.strength[None, :])
            bar = self._stop(f.k + 1) + self._wrong_fail(f.k)[None, :]
            cont = others - self.fail * if_failed - bar
            cont = np.where(np.isfinite(cont), np.maximum(cont, 0.0), 0.0)
            v = np.clip(self.value[min(f.k, self.attempts - 1)], 0.0, 1.0)
            a = self.check_accuracy
            p_fail = (1.0 - v) * a + v * (1.0 - a)
            out = now + self.look * p_fail[None, :] * cont
        return np.asarray(np.where(f.allowed, out, -np.inf))

    def decide(self, f: Features) -> np.ndarray:
        """[N] the worker of the next attempt, or −1 to stop."""
        score = self.scores(f)
        best = score.argmax(axis=1)
        top = score[np.arange(len(score)), best]
        go = np.isfinite(top) if f.k == 0 else np.isfinite(top) & (top > self.bar(f)) & ~f.last_passed
        return np.asarray(np.where(go & (f.k < f.limit), best, -1))

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value.round(6).tolist(),
            "text": self.text.round(6).tolist(),
            "stop": self.stop.round(6).tolist(),
            "fail": round(self.fail, 6),
            "spend": round(self.spend, 6),
            "look": round(self.look, 6),
            "strength": self.strength.round(6).tolist(),
            "check_accuracy": self.check_accuracy,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EscalationPolicy:
        return cls(
            value=np.asarray(data["value"], dtype=np.float64),
            text=np.asarray(data["text"], dtype=np.float64),
            stop=np.asarray(data["stop"], dtype=np.float64),
            fail=float(data["fail"]),
            spend=float(data["spend"]),
            look=float(data["look"]),
            strength=np.asarray(data["strength"], dtype=np.float64),
            check_accuracy=float(data.get("check_accuracy", 0.9)),
        )


def supervised(reward: np.ndarray, attempts: int = 3, check_accuracy: float = 0.9) -> EscalationPolicy:
    """Stage 2's starting point, from measured outcomes alone. `reward` [N, W]: normalised rewards (NaN where
    unmeasured). value[0, j] is j's mean reward; value[k, j] its mean over the prompts weighted by how often
    an attempt there fails, to the power k (what j is worth once k attempts failed); the bar after a failed
    check is the chance that the failed attempt was right after all (`bar`), with no margin."""
    r = np.clip(reward, 0.0, 1.0)
    strength = col_mean(r)
    fails = 1.0 - np.nanmean(r, axis=1)  # [N]
    rows = [strength]
    for k in range(1, attempts):
        w = np.where(np.isnan(r), 0.0, fails[:, None] ** k)
        rows.append(np.where(np.isnan(r), 0.0, r * w).sum(axis=0) / np.maximum(w.sum(axis=0), 1e-12))
    return EscalationPolicy(
        value=np.stack(rows),
        text=np.ones(attempts),
        stop=np.zeros(attempts - 1),
        fail=0.0,
        spend=0.0,
        look=1.0,
        strength=strength,
        check_accuracy=check_accuracy,
    )


def shrinks_at(tables: Sequence[Sequence[tuple[float, float]]], lam: float, width: int) -> np.ndarray:
    """[W] s_j(λ) from one shrink table per column (none: 0, the text is not used)."""
    if not tables:
        return np.zeros(width)
    return np.array([shrink_at(t, lam) for t in tables])


def evidence_features(
    policy: EscalationPolicy, batch: Batch, cost: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """([N, W] may attempt next, [N] strongest failed, [N] overrun, [N] last column) of a batch."""
    n, w = len(batch.tasks), len(cost)
    tried = np.zeros((n, w), dtype=bool)
    failed = np.zeros((n, w), dtype=bool)
    expected = np.zeros(n)
    for a in range(batch.k):
        who = batch.workers[:, a]
        made = who >= 0
        col = np.clip(who, 0, None)
        tried[made, col[made]] = True
        failed[made, col[made]] |= ~batch.passed[made, a]
        expected += np.where(made, cost[col], 0.0)
    strongest = np.where(failed, policy.strength[None, :], 0.0).max(axis=1) if w else np.zeros(n)
    overrun = np.log((batch.spent + EPS_USD) / (expected + EPS_USD)) if batch.k else np.zeros(n)
    ok = ~tried if allowed is None else ~tried & allowed
    last = batch.workers[:, -1] if batch.k else np.full(n, -1)
    return ok, strongest, overrun, last


@dataclass(frozen=True, eq=False)
class ReplayPolicy:
    """An escalation policy as a replay `BatchPolicy`: `dev` [N_tasks, W] the text's deviation per task of the
    replayed data, `cost` [W] what it expects an attempt to cost, at one λ with `shrink` [W] s_j(λ), or at
    one λ per episode ([B] and [B, W], aligned with the tasks given to `run_batch`)."""

    policy: EscalationPolicy
    dev: np.ndarray
    shrink: np.ndarray
    cost: np.ndarray
    lam: float | np.ndarray
    limit: int

    def __call__(self, batch: Batch) -> np.ndarray:
        allowed, strongest, overrun, last = evidence_features(self.policy, batch, self.cost)
        f = Features(
            batch.k,
            self.dev[batch.tasks],
            self.shrink,
            self.cost,
            self.lam,
            allowed,
            strongest,
            overrun,
            batch.last_passed,
            last,
            self.limit,
        )
        return self.policy.decide(f)
