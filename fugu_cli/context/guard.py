"""One agent run's context guard: counts each step's request for every worker, says who is masked and who is
past the compaction threshold, and compacts the run's transcript in place (recording it, making its event).

The agent asks it before every step; it never picks a worker and never prints.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.calls import WorkerCall
from fugu_cli.context.budget import ContextPolicy, Fit, RunningCounts, fit
from fugu_cli.context.compact import Compaction, Compactor, CompactRequest
from fugu_cli.events import Compacted
from fugu_cli.ledger import TurnLedger
from fugu_cli.llm import LLM
from fugu_cli.types import Message, RouteDecision, Usage, Worker


@dataclass(frozen=True)
class StepFit:
    """A step's `Fit` with the policy's threshold applied."""

    fit: Fit
    thresholds: Mapping[str, int]
    live: tuple[str, ...]

    @property
    def tokens(self) -> Mapping[str, int]:
        return self.fit.tokens

    @property
    def masked(self) -> Mapping[str, str]:
        return self.fit.masked

    @property
    def nobody_fits(self) -> bool:
        return bool(self.live) and all(n in self.fit.masked for n in self.live)

    def past_threshold(self, worker: str) -> bool:
        return self.fit.tokens.get(worker, 0) > self.thresholds.get(worker, 1 << 62)

    def reason(self) -> str:
        return self.fit.reason()


@dataclass(frozen=True)
class Done:
    """A compaction made during a run: what the agent tallies and emits."""

    compaction: Compaction
    target: str
    trigger: str
    summarizer: RouteDecision | None = None
    usage: Usage = field(default_factory=Usage)

    def event(self, session_id: str) -> Compacted:
        r = self.compaction.record
        return Compacted(
            session_id=session_id,
            trigger=self.trigger,
            worker=self.target,
            summarizer=r.summarizer,
            tokens_before=r.tokens_before,
            tokens_after=r.tokens_after,
            messages_replaced=self.compaction.replaced,
            focus=r.focus,
        )


class ContextGuard:
    def __init__(
        self,
        policy: ContextPolicy,
        llm: LLM,
        calls: WorkerCall,
        workers: Sequence[Worker],
        tools: Sequence[Mapping[str, Any]],
        ledger: TurnLedger,
        root: Path | None = None,
    ) -> None:
        self.policy, self.workers, self.tools, self.ledger = policy, list(workers), tools, ledger
        self.compactor = Compactor(llm, calls, policy, self.workers, tools, ledger.ledger, root)
        self.running = RunningCounts()

    def fit(self, request: Sequence[Message], failed: Collection[str]) -> StepFit:
        counted = fit(self.policy, self.workers, request, self.tools, skip=failed, running=self.running)
        live = tuple(w.name for w in self.workers if w.name not in failed)
        thresholds = {w.name: self.policy.threshold(w) for w in self.workers if w.name in counted.tokens}
        return StepFit(counted, thresholds, live)

    def roomiest(self, failed: Collection[str]) -> Worker:
        """The live worker with the largest window: what a compaction for nobody-fits aims at."""
        live = [w for w in self.workers if w.name not in failed] or self.workers
        best: Worker = max(live, key=lambda w: self.policy.window(w).usable)
        return best

    def compact(
        self,
        messages: list[Message],
        target: Worker,
        trigger: str,
        failed: Collection[str] = (),
        cancel: threading.Event | None = None,
        focus: str = "",
        keep_tokens: int | None = None,
    ) -> Done | None:
        """Compact `messages` in place for `target`; None when nothing could be made smaller."""
        request = CompactRequest(target, trigger, focus, frozenset(failed), self.ledger.turn, keep_tokens)
        done = self.compactor.compact(messages, request, cancel)
        if done is None:
            return None
        messages[:] = done.messages
        return Done(done, target.name, trigger, done.summarizer, done.usage)
