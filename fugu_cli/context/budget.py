"""Who can hold the transcript: each worker's request size in its own tokenizer, against its window less the
reserve for its reply. A worker that cannot hold it is masked for the step; past `compact_at` of the chosen
worker's window the transcript is compacted first. A request whose upper bound (its bytes) is already under
a worker's threshold is not counted for it: the decision is the same, and no tokenizer has to load.
Never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fugu_cli.llm.tokens import TokenCounter, Window, message_bound, request_tokens, tools_bound
from fugu_cli.types import Message, Worker


@dataclass(frozen=True)
class ContextPolicy:
    """How the agent keeps requests inside windows (built by app.py from `[context]`)."""

    counter: TokenCounter
    compact_at: float = 0.8  # share of the chosen worker's window that triggers compaction
    keep_recent: float = 0.3  # share of the target's usable window kept verbatim when compacting
    summarizer: str | None = None  # the worker that writes summaries; None: the cheapest that fits

    def window(self, worker: Worker) -> Window:
        return self.counter.window(worker)

    def tokens(self, worker: Worker, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]) -> int:
        return request_tokens(self.counter, worker, messages, tools)

    def threshold(self, worker: Worker) -> int:
        """Request tokens past which a step for `worker` compacts first."""
        w = self.window(worker)
        return min(int(w.tokens * self.compact_at), w.usable)


@dataclass(frozen=True)
class Fit:
    """Request tokens per worker for one step, and the workers masked because they cannot hold it. A worker
    whose request was not counted (its upper bound is under its threshold) has that bound instead."""

    tokens: Mapping[str, int]
    masked: Mapping[str, str] = field(default_factory=dict)

    def reason(self) -> str:
        """How a route decision says why workers were masked ('' when none was)."""
        if not self.masked:
            return ""
        return "masked (window too small): " + "; ".join(self.masked.values())


class RunningCounts:
    """Prefix sums of a transcript's token counts per tokenizer family: a transcript that only grew since
    the last step is counted for its new messages alone, so a step's counting stays flat as it grows."""

    def __init__(self) -> None:
        self._by_family: dict[str, tuple[list[Message], list[int]]] = {}

    def total(self, policy: ContextPolicy, worker: Worker, messages: Sequence[Message]) -> int:
        return self._sum(policy.counter.family(worker), messages, lambda m: policy.counter.message(worker, m))

    def bound(self, messages: Sequence[Message]) -> int:
        """An upper bound of `total` for every worker (`message_bound` summed)."""
        return self._sum("", messages, message_bound)

    def _sum(self, family: str, messages: Sequence[Message], count: Callable[[Message], int]) -> int:
        old, sums = self._by_family.get(family, ([], [0]))
        same, limit = 0, min(len(old), len(messages))
        while same < limit and old[same] is messages[same]:
            same += 1
        sums = sums[: same + 1]
        for m in messages[same:]:
            sums.append(sums[-1] + count(m))
        self._by_family[family] = (list(messages), sums)
        return sums[-1]


def fit(
    policy: ContextPolicy,
    workers: Sequence[Worker],
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    skip: Collection[str] = (),
    running: RunningCounts | None = None,
) -> Fit:
    """Count the request for every worker not in `skip` (once per tokenizer family) and mask those whose
    window cannot hold it plus their reply reserve."""
    by_family: dict[str, int] = {}
    tokens: dict[str, int] = {}
    masked: dict[str, str] = {}
    bound = running.bound(messages) + tools_bound(tools) + 3 if running is not None else None
    for w in workers:
        if w.name in skip:
            continue
        if bound is not None and bound <= policy.threshold(w):
            tokens[w.name] = bound
            continue
        family = policy.counter.family(w)
        if family not in by_family:
            if running is None:
                by_family[family] = policy.tokens(w, messages, tools)
            else:
                by_family[family] = running.total(policy, w, messages) + policy.counter.tools(w, tools) + 3
        need = tokens[w.name] = by_family[family]
        window = policy.window(w)
        if need > window.usable:
            masked[w.name] = (
                f"{w.name} holds {window.tokens:,} tokens, the request needs {need:,} "
                f"+ {window.reserve:,} for the reply"
            )
    return Fit(tokens, masked)


def usage_lines(
    policy: ContextPolicy,
    workers: Sequence[Worker],
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
) -> list[tuple[str, int, Window]]:
    """(worker, request tokens now, window) for each worker: what `/cost` shows as context used."""
    counted = fit(policy, workers, messages, tools)
    return [(w.name, counted.tokens[w.name], policy.window(w)) for w in workers]
