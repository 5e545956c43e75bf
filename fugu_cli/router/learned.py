"""The learned router: backbone features + selection head, re-asked before every step (fugu mode).

Scores every worker in the pool (unseen ones from their descriptions) by the checkpoint's `Decision`, the same
utility `fugu router eval` judges (normalised reward − λ·USD), masks the excluded, and picks the best. λ is
the session's `cost_weight` in reward per USD (default: the checkpoint's own λ). The head already charges each
known worker λ_ckpt × its training cost per task; a session with another λ adds (λ − λ_ckpt) × the worker's
expected cost, estimated from token counts and prices for this step and scaled to a task by what the
checkpoint's workers cost per task against their step estimate here. Staying with the last worker earns λ ×
the cached-prefix saving. `escalate` chooses a turn's attempts by the checkpoint's escalation policy
(`escalation.py`: the evidence of this turn's checks beside the same text features; see `fugu_cli.router`
for how a session drives it). Imports torch: import this module lazily. Never prints.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from fugu_cli.errors import ConfigError
from fugu_cli.router.backbone import Backbone, load_backbone
from fugu_cli.router.checkpoint import RouterCheckpoint, build_head, info_text, load_checkpoint
from fugu_cli.router.escalation import EPS_USD, EscalationPolicy, Features
from fugu_cli.router.features import FEATURES_VERSION, TranscriptEncoder, description_text
from fugu_cli.router.head import SelectionHead
from fugu_cli.router.prior import attempt_reason, stop_reason
from fugu_cli.router.roles import ROLES
from fugu_cli.router.svf import apply_svf
from fugu_cli.types import Message, RouteDecision, RouteState, Stop, Worker

__all__ = ["LearnedRouter", "expected_costs", "info_text"]

CACHED_INPUT_FACTOR = 0.1  # without a cached price: providers bill a cached prefix at about a tenth
PROMPT_OVERHEAD_TOKENS = 2000  # system prompt and tool schemas, sent with every step
OUTPUT_TOKENS = 400  # a typical step's reply


class LearnedRouter:
    """`Router` backed by a checkpoint. `cost_weight` is λ in reward per USD, the unit of `fugu router train
    --lambda` and of eval's λ sweep; None means the checkpoint's own λ."""

    def __init__(
        self,
        backbone: Backbone,
        head: SelectionHead,
        meta: RouterCheckpoint,
        *,
        cost_weight: float | None = None,
    ) -> None:
        self.backbone = backbone
        self.head = head
        head.eval()
        self.meta = meta
        self.cost_weight = meta.decision.lam if cost_weight is None else cost_weight
        self.name = "learned"
        self.encoder = TranscriptEncoder(backbone, max_tokens=meta.max_tokens, step_tokens=meta.step_tokens)
        self._known = {w.name: i for i, w in enumerate(meta.workers)}
        self._known_models = {w.model: i for i, w in enumerate(meta.workers) if w.model}
        self.escalation = EscalationPolicy.from_json(meta.escalation) if meta.escalation else None

    @classmethod
    def load(
        cls,
        path: Path | str,
        *,
        cost_weight: float | None = None,
        threads: int | None = 2,
        backbone: Backbone | None = None,
    ) -> LearnedRouter:
        """`backbone` reuses an already loaded one (same id, and only for checkpoints without SVF, which
        would change its weights)."""
        meta, head_state, svf_state = load_checkpoint(Path(path))
        if meta.features != FEATURES_VERSION:
            raise ConfigError(
                f"router checkpoint {path} uses features {meta.features!r}; this fugu computes "
                f"{FEATURES_VERSION!r}. Retrain it with `fugu router train`, or upgrade fugu."
            )
        if backbone is not None and (backbone.id != meta.backbone or svf_state):
            raise ValueError(f"checkpoint {path} needs its own {meta.backbone} backbone")
        backbone = backbone or load_backbone(meta.backbone, threads=threads)
        if svf_state:
            svf = apply_svf(backbone.model, list(svf_state))
            svf.load_state_dict(svf_state)
            svf.merge()
        router = cls(backbone, build_head(meta, head_state), meta, cost_weight=cost_weight)
        router.name = f"learned:{Path(path).name}"
        return router

    @property
    def has_roles(self) -> bool:
        """Whether this checkpoint chooses a role (Thinker, Worker, Verifier) with each worker."""
        return self.head.roles is not None

    def logits(self, state: RouteState, pool: Sequence[Worker]) -> torch.Tensor:
        """[W] raw head logits for `pool` (no mask, no cost)."""
        return self._logits(*self._features(state, pool), pool)

    def _features(self, state: RouteState, pool: Sequence[Worker]) -> tuple[torch.Tensor, torch.Tensor]:
        """[H] transcript features and [W, D] the pool's description embeddings, from one backbone call
        for whatever of either is not cached yet (a decision's new messages; the pool's descriptions once)."""
        return self._features_many([(state, pool)])[0]

    def _logits(self, h: torch.Tensor, desc: torch.Tensor, pool: Sequence[Worker]) -> torch.Tensor:
        """[H], [W, D] -> [W]"""
        known = torch.tensor([self._index(w) for w in pool], dtype=torch.long)
        with torch.inference_mode():
            out: torch.Tensor = self.head(h[None], desc, known=known)[0]
        return out

    def utilities(self, state: RouteState, pool: Sequence[Worker]) -> np.ndarray:
        """[W] the utility of each pool worker for the next step (no mask): what `pick` maximises."""
        return self._utilities(self._logits(*self._features(state, pool), pool), state, pool)

    def _utilities(self, logits: torch.Tensor, state: RouteState, pool: Sequence[Worker]) -> np.ndarray:
        d = self.meta.decision
        known = np.array([self._index(w) for w in pool])
        logp = torch.log_softmax(logits.double(), dim=0).numpy()[None, :]
        lam = self.cost_weight
        util = d.base(logp, known, lam)[0]  # the shrink of the session's λ, as eval's sweep uses it
        if lam == 0 and d.lam == 0:
            return np.asarray(util)
        fresh = np.array(expected_costs(state, pool, cached=False))
        staying = np.array(expected_costs(state, pool))
        per_task = self._task_costs(state, pool, known, fresh)
        charge = np.where(known >= 0, lam - d.lam, lam) * per_task
        return np.asarray(util - charge + lam * (fresh - staying))

    def _task_costs(
        self, state: RouteState, pool: Sequence[Worker], known: np.ndarray, fresh: np.ndarray | None = None
    ) -> np.ndarray:
        """[W] USD each worker would spend on the whole task: this step's estimate scaled by what the
        checkpoint's workers cost per task against their step estimate here."""
        d = self.meta.decision
        step = np.array(expected_costs(state, pool, cached=False)) if fresh is None else fresh
        return np.asarray(step * _task_ratio(d.costs(known, np.zeros(len(pool))), known, step))

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        out = self.pick_many([(state, pool)])[0]
        if isinstance(out, Exception):
            raise out
        return out

    def pick_many(
        self, asks: Sequence[tuple[RouteState, Sequence[Worker]]]
    ) -> list[RouteDecision | Exception]:
        """`pick` for each (state, pool), with one backbone call for every line not cached yet (a server's
        concurrent decisions in one forward pass). Each decision is the one `pick` makes alone: a line's
        vector does not depend on its batch (padding is masked), and the head and the utilities are each
        decision's own. A decision that cannot be made (every worker excluded) is its `LookupError`.
        `latency_ms` is the time from the batch's start to the decision."""
        start = time.perf_counter()
        out: list[RouteDecision | Exception] = []
        todo: list[tuple[int, RouteState, Sequence[Worker], np.ndarray]] = []
        for i, (state, pool) in enumerate(asks):
            barred = state.barred([w.name for w in pool])
            live = np.array([w.name not in barred for w in pool])
            out.append(LookupError("every worker in the pool is excluded"))
            if live.any():
                todo.append((i, state, pool, live))
        features = self._features_many([(state, pool) for _, state, pool, _ in todo])
        for (i, state, pool, live), (h, desc) in zip(todo, features, strict=True):
            out[i] = self._decide(state, pool, live, h, desc, start)
        return out

    def _features_many(
        self, asks: Sequence[tuple[RouteState, Sequence[Worker]]]
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`_features` of each (state, pool), from one backbone call for all of them."""
        parts: list[tuple[int, int]] = []  # (lines, descriptions) of each ask, in `every`'s order
        every: list[str] = []
        limits: list[int] = []
        for state, pool in asks:
            lines, caps = self.encoder.window(state.messages)
            descs = [self._description(w) for w in pool]
            every += [*lines, *descs]
            limits += [*caps, *[self.meta.max_tokens] * len(descs)]
            parts.append((len(lines), len(descs)))
        vecs = self.encoder.lines(every, limits)
        out = []
        at = 0
        for n_lines, n_descs in parts:
            mine = vecs[at : at + n_lines + n_descs]
            out.append((self.encoder.combine(mine[:n_lines]), mine[n_lines:]))
            at += n_lines + n_descs
        return out

    def _decide(
        self,
        state: RouteState,
        pool: Sequence[Worker],
        live: np.ndarray,
        h: torch.Tensor,
        desc: torch.Tensor,
        start: float,
    ) -> RouteDecision:
        util = self._utilities(self._logits(h, desc, pool), state, pool)
        masked = np.where(live, util, -np.inf)
        best = int(np.argmax(masked))  # first maximum: ties go to the earlier worker in the pool
        z = (masked - masked[best]) / max(self.meta.decision.tau, 1e-6)
        probs = np.exp(z) / np.exp(z).sum()
        role = None
        if self.head.roles is not None:
            with torch.inference_mode():
                role = ROLES[int(torch.argmax(self.head.role_logits(h[None])[0]))]
        return RouteDecision(
            worker=pool[best].name,
            scores={w.name: float(p) for w, p in zip(pool, probs, strict=True)},
            source="learned",
            latency_ms=(time.perf_counter() - start) * 1000,
            role=role,
            reason=f"utility {float(util[best]):.3f}, λ={self.cost_weight:g}",
        )

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        """The next attempt's worker by the checkpoint's escalation policy (without one: the best utility
        that has made no attempt this turn), or Stop and why."""
        start = time.perf_counter()
        why = stop_reason(state, pool)
        if why:
            return Stop(why)
        live = np.array([w.name not in state.excluded and w.name not in state.tried for w in pool])
        logits = self._logits(*self._features(state, pool), pool)
        k, bar = len(state.evidence.attempts), float("-inf")
        if self.escalation is None:
            score = np.where(live, self._utilities(logits, state, pool), -np.inf)
            choice, what = int(np.argmax(score)), "utility"
        else:
            f = self._evidence(logits, state, pool, live, self.escalation)
            policy = self.escalation.columns(f.known)
            score = policy.scores(f.features)[0]
            choice, what = int(policy.decide(f.features)[0]), "escalation score"
            bar = float(policy.bar(f.features)[0])
        probs = _softmax(score, self.meta.decision.tau)
        scores = {w.name: float(p) for w, p in zip(pool, probs, strict=True)}
        best = int(np.argmax(score))
        if choice < 0:
            return Stop(
                f"no further attempt is worth its cost: the best, {pool[best].name}, scores "
                f"{float(score[best]):.3f} against {bar:.3f} for stopping (λ={self.cost_weight:g})",
                scores,
            )
        why = f"{what} {float(score[choice]):.3f}" + (f" > stop {bar:.3f}" if k else "")
        return RouteDecision(
            worker=pool[choice].name,
            scores=scores,
            source="learned",
            latency_ms=(time.perf_counter() - start) * 1000,
            reason=attempt_reason(state, f"{why}, λ={self.cost_weight:g}"),
        )

    def _evidence(
        self,
        logits: torch.Tensor,
        state: RouteState,
        pool: Sequence[Worker],
        live: np.ndarray,
        escalation: EscalationPolicy,
    ) -> _Evidence:
        """The escalation policy's features of this turn: the text beside the checks' evidence."""
        d = self.meta.decision
        known = np.array([self._index(w) for w in pool])
        logp = torch.log_softmax(logits.double(), dim=0).numpy()[None, :]
        lam = self.cost_weight
        cost = d.costs(known, self._task_costs(state, pool, known))
        ev = state.evidence
        col = {w.name: j for j, w in enumerate(pool)}
        strength = escalation.columns(known).strength
        failed = [col[w] for w in ev.failed if w in col]
        expected = sum(cost[col[a.worker]] if a.worker in col else a.cost_usd for a in ev.attempts)
        overrun = np.log((ev.spent + EPS_USD) / (expected + EPS_USD)) if ev.attempts else 0.0
        features = Features(
            k=len(ev.attempts),
            dev=d.deviation(logp, known),
            shrink=d.shrink(known, lam),
            cost=np.asarray(cost, dtype=float),
            lam=lam,
            allowed=live[None, :],
            strongest=np.array([max((float(strength[j]) for j in failed), default=0.0)]),
            overrun=np.array([overrun]),
            last_passed=np.array([bool(ev.attempts and ev.attempts[-1].passed)]),
            last=np.array([col.get(ev.attempts[-1].worker, -1) if ev.attempts else -1]),
            limit=ev.max_attempts or escalation.attempts,
        )
        return _Evidence(known, features)

    def _index(self, worker: Worker) -> int:
        """The checkpoint's worker this pool worker is: same name, else same litellm model; -1 if new."""
        index = self._known.get(worker.name)
        if index is None:
            index = self._known_models.get(worker.model, -1)
        return index

    def _description(self, worker: Worker) -> str:
        """Known workers keep the description they were trained with; new ones bring their own."""
        index = self._index(worker)
        trained = self.meta.workers[index].description if index >= 0 else ""
        return description_text(worker.name, trained or worker.description, worker.model)


class _Evidence(NamedTuple):
    known: np.ndarray  # [W] each pool worker's index in the checkpoint (−1: unseen)
    features: Features


def _softmax(score: np.ndarray, tau: float) -> np.ndarray:
    z = np.where(np.isfinite(score), score - np.max(score), -np.inf) / max(tau, 1e-6)
    e = np.exp(z)
    return np.asarray(e / e.sum())


def expected_costs(state: RouteState, pool: Sequence[Worker], *, cached: bool = True) -> list[float]:
    """USD each worker would likely spend on the next step. The worker that took the last step reads the
    transcript up to its own last message at the cached price (unless `cached` is False); anyone else pays
    full prefill for all of it."""
    sizes = [_tokens(m) for m in state.messages]
    total = PROMPT_OVERHEAD_TOKENS + sum(sizes)
    mine = [i for i, m in enumerate(state.messages) if m.worker and m.worker == state.last_worker]
    if not mine and state.last_worker:  # no attribution recorded: its last reply is the last assistant one
        mine = [i for i, m in enumerate(state.messages) if m.role == "assistant"]
    cached_tokens = PROMPT_OVERHEAD_TOKENS + sum(sizes[: mine[-1] + 1]) if mine else 0
    out = []
    for w in pool:
        p_in, p_out = w.price_in or 0.0, w.price_out or 0.0
        p_cached = w.price_cached if w.price_cached is not None else CACHED_INPUT_FACTOR * p_in
        prefix = cached_tokens if cached and w.name == state.last_worker else 0
        out.append((p_in * (total - prefix) + p_cached * prefix + p_out * OUTPUT_TOKENS) / 1e6)
    return out


def _tokens(message: Message) -> int:
    return len(message.as_line()) // 4 + 4


def _task_ratio(task_cost: np.ndarray, known: np.ndarray, step_cost: np.ndarray) -> float:
    """How many of this step's estimated dollars one task cost, judged on the pool's known workers: the
    median of (training cost per task / step estimate here). 1 when no known worker has both."""
    ok = (known >= 0) & (task_cost > 0) & (step_cost > 0)
    return float(np.median(task_cost[ok] / step_cost[ok])) if ok.any() else 1.0
