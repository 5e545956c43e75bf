"""Compaction: older steps of a transcript replaced by a summary, so the work goes on inside a window.

Keeps the system prompt, the task (first user message), the current turn's message and the latest steps
verbatim, cutting only between steps (a tool result never loses its call); appends the facts the session's
ledger distils (files read with hashes, commands and exit codes, edits, tests). The summary is written by the
cheapest worker whose window holds the request (or `[context] summarizer`); when it cannot be written, the
facts stand alone. The store keeps every message: this only records what workers see from now on.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli import memory
from fugu_cli.calls import Call, Exclusions, WorkerCall
from fugu_cli.context.budget import ContextPolicy
from fugu_cli.errors import ProviderError
from fugu_cli.ledger import CompactionRecord, Ledger, StepRecord, TurnLedger
from fugu_cli.llm import LLM
from fugu_cli.types import Message, RouteDecision, Usage, Worker

SUMMARY_NAME = "fugu-summary"  # marks a summary message (a user message, so every provider accepts it)
SUMMARY_TOKENS = 1_500  # room left for the summary itself in the summarizer's window
MAX_SUMMARY_INPUT = 100_000  # tokens of transcript a summarizer reads at most
PER_MESSAGE_CHARS = 2_400  # of each older message the summarizer reads (head and tail)
ELIDE_KEEP_CHARS = 1_600  # of an oversized kept message, head plus tail


@dataclass(frozen=True)
class CompactRequest:
    target: Worker  # the worker the transcript must fit (its tokenizer counts before and after)
    trigger: str  # threshold | no-fit | overflow | user
    focus: str = ""  # what the summary should keep above all (`/compact FOCUS`)
    exclude: frozenset[str] = frozenset()  # workers that may not summarize (failed this step)
    turn: int = 0
    keep_tokens: int | None = None  # of the latest steps kept verbatim (default: `keep_recent` of the window)


@dataclass(frozen=True)
class Compaction:
    messages: tuple[Message, ...]
    record: CompactionRecord
    usage: Usage
    summarizer: RouteDecision | None
    replaced: int  # messages of the old transcript that the new head replaces


@dataclass(frozen=True)
class _Parts:
    system: list[Message]
    task: list[Message]
    middle: list[Message]
    pinned: list[Message]  # the current turn's message, when it is older than the kept steps
    tail: list[Message]


class Compactor:
    """Compacts one transcript (one ledger scope) and records it."""

    def __init__(
        self,
        llm: LLM,
        calls: WorkerCall,
        policy: ContextPolicy,
        pool: Sequence[Worker],
        tools: Sequence[Mapping[str, Any]],
        ledger: Ledger,
        root: Path | None = None,
    ) -> None:
        self.llm, self.calls, self.policy, self.pool, self.tools = llm, calls, policy, tuple(pool), tools
        self.ledger, self.root = ledger, root

    def compact(
        self, messages: Sequence[Message], req: CompactRequest, cancel: threading.Event | None = None
    ) -> Compaction | None:
        """The compacted transcript, recorded in the ledger; None when nothing could be made smaller."""
        target = req.target
        count = self._counter(target)
        before = self.policy.tokens(target, messages, self.tools)
        keep = req.keep_tokens
        if keep is None:
            keep = int(self.policy.window(target).usable * self.policy.keep_recent)
        parts = split(messages, keep, count)
        usage, decision, summary = Usage(), None, None
        if parts.middle:
            summary, usage, decision = self._summary(parts, req, cancel)
        new = [*parts.system, *parts.task, *([summary] if summary else []), *parts.pinned, *parts.tail]
        new = elide(new, self.policy.threshold(target) * 3 // 4, self.policy, target, self.tools)
        after = self.policy.tokens(target, new, self.tools)
        if after >= before:
            return None
        kept = _common_tail(messages, new)
        record = CompactionRecord(
            head=tuple(new[: len(new) - kept]),
            kept=kept,
            tokens_before=before,
            tokens_after=after,
            trigger=req.trigger,
            worker=target.name,
            summarizer=decision.worker if decision else "",
            focus=req.focus,
        )
        self.ledger.turn(req.turn).compacted(record)
        return Compaction(tuple(new), record, usage, decision, len(messages) - kept)

    def _counter(self, worker: Worker) -> Callable[[Message], int]:
        return lambda m: self.policy.counter.message(worker, m)

    def _summary(
        self, parts: _Parts, req: CompactRequest, cancel: threading.Event | None
    ) -> tuple[Message, Usage, RouteDecision | None]:
        facts = memory.facts_text(
            memory.transcript_facts(self.ledger.tool_calls()),
            "Facts the environment reported (verify what matters):",
            self.root,
        )
        picked = self.pick_summarizer(req.exclude)
        usage, text, decision = Usage(), "", None
        if picked is not None:
            worker, why = picked
            chosen = RouteDecision(worker.name, {}, "prior", 0.0, role="summarize", reason=why)
            request = self._request(parts, req, worker)
            ledger, step = self._ledger(req.turn)

            def route(ex: Exclusions) -> RouteDecision:
                if worker.name in ex.names:
                    raise LookupError(worker.name)
                return chosen

            try:
                answer = self.calls.run(
                    Call(
                        pool=self.pool,
                        route=route,
                        send=lambda t: self.llm.complete(t.worker, request, (), cancel=cancel),
                        ledger=ledger,
                        step=step,
                        cancel=cancel,
                    )
                )
                done = answer.value
                text, usage, decision = (done.message.content or "").strip(), done.usage, answer.decision
                ledger.step(StepRecord(step, decision, "ok", usage, text[:4000], answer.started))
            except ProviderError as e:
                text = f"(The summary could not be written: {e}.)"
        if not text:
            text = "(No worker could write a summary.)"
        note = (
            f"[Earlier steps of this session were compacted: {len(parts.middle)} messages replaced by this "
            "summary. The full transcript is kept in the session store.]"
        )
        body = "\n\n".join(x for x in (note, text, _older_calls(parts.middle), facts) if x)
        return Message("user", body, name=SUMMARY_NAME), usage, decision

    def pick_summarizer(self, exclude: frozenset[str] = frozenset()) -> tuple[Worker, str] | None:
        """The `summarize` role's worker: the configured one, else the cheapest whose window is at least
        large enough for a short summary request (ties: the larger window)."""
        live = [w for w in self.pool if w.name not in exclude]
        named = [w for w in live if w.name == self.policy.summarizer]
        if named:
            return named[0], "the configured summarizer"
        capable = [w for w in live if self.policy.window(w).usable >= 4 * SUMMARY_TOKENS]
        if not capable:
            capable = live
        if not capable:
            return None

        def key(w: Worker) -> tuple[bool, float, int]:
            known = w.price_in is not None or w.price_out is not None
            price = (w.price_in or 0.0) + (w.price_out or 0.0)
            return (not known, price, -self.policy.window(w).usable)

        best = min(capable, key=key)
        return best, "the cheapest worker whose window holds the summary request"

    def _request(self, parts: _Parts, req: CompactRequest, worker: Worker) -> list[Message]:
        from fugu_cli import prompts

        room = self.policy.window(worker).usable - SUMMARY_TOKENS - 1_000
        budget_chars = max(min(room, MAX_SUMMARY_INPUT), 1_000) * 3
        lines: list[str] = []
        used = 0
        for m in reversed(parts.middle):
            line = _render(m)
            if used + len(line) > budget_chars:
                lines.append(f"[… {len(parts.middle) - len(lines)} older messages left out]")
                break
            lines.append(line)
            used += len(line)
        task = (parts.task[0].content or "") if parts.task else ""
        focus = f"\n\nFocus the summary on: {req.focus}" if req.focus else ""
        text = f"The task: {task[:4000]}{focus}\n\nThe transcript to summarize:\n\n" + "\n\n".join(
            reversed(lines)
        )
        return [Message("system", prompts.load("compact")), Message("user", text)]

    def _ledger(self, turn: int) -> tuple[TurnLedger, int]:
        """Where a summary's call is recorded: the transcript's `compact` scope, as its next step."""
        scope = "compact" if self.ledger.scope == "main" else f"{self.ledger.scope}.compact"
        ledger = self.ledger.sibling(scope)
        return ledger.turn(turn), len(ledger.steps()) + 1


def split(messages: Sequence[Message], keep_tokens: int, count: Callable[[Message], int]) -> _Parts:
    """System prompt, task, what to summarize, the pinned turn message and the verbatim tail. The tail starts
    at a step boundary (an assistant or user message), holds at most `keep_tokens` unless the last step alone
    is larger, and always holds the last step."""
    n = len(messages)
    start = 0
    while start < n and messages[start].role == "system":
        start += 1
    system = list(messages[:start])
    task_at = start if start < n and messages[start].role == "user" else None
    body_from = start + 1 if task_at is not None else start
    boundaries = {i for i in range(body_from, n) if messages[i].role in ("user", "assistant")}
    cut = n
    size = 0
    for i in range(n - 1, body_from - 1, -1):
        size += count(messages[i])
        if i in boundaries and (size <= keep_tokens or cut == n):
            cut = i
        if size > keep_tokens and cut != n:
            break
    middle = list(messages[body_from:cut])
    turn_at = max(
        (i for i, m in enumerate(middle) if m.role == "user" and m.name != SUMMARY_NAME), default=None
    )
    pinned = [middle.pop(turn_at)] if turn_at is not None else []
    task = [messages[task_at]] if task_at is not None else []
    return _Parts(system, task, middle, pinned, list(messages[cut:]))


def elide(
    messages: list[Message], budget: int, policy: ContextPolicy, worker: Worker, tools: Sequence[Any]
) -> list[Message]:
    """Cut the largest kept messages (not the system prompt or the task) to their head and tail until the
    transcript fits `budget` tokens, or nothing is left to cut. Only for outputs no window could hold."""
    out = list(messages)
    if policy.tokens(worker, out, tools) <= budget:
        return out
    order = sorted(
        (
            i
            for i, m in enumerate(out)
            if m.role in ("tool", "assistant") and len(m.content or "") > 2 * ELIDE_KEEP_CHARS
        ),
        key=lambda i: -len(out[i].content or ""),
    )
    for i in order:
        text = out[i].content or ""
        half = ELIDE_KEEP_CHARS // 2
        cut = len(text) - 2 * half
        note = f"\n[… {cut:,} characters cut when the transcript was compacted; read the source again …]\n"
        out[i] = dataclasses.replace(out[i], content=text[:half] + note + text[-half:])
        if policy.tokens(worker, out, tools) <= budget:
            break
    return out


def _common_tail(old: Sequence[Message], new: Sequence[Message]) -> int:
    """How many trailing messages the new transcript shares, unchanged, with the old one."""
    k = 0
    while k < min(len(old), len(new)) and old[len(old) - 1 - k] is new[len(new) - 1 - k]:
        k += 1
    return k


def _render(m: Message) -> str:
    who = f"{m.role}" + (f" ({m.worker})" if m.worker else "")
    text = m.content or ""
    if len(text) > PER_MESSAGE_CHARS:
        half = PER_MESSAGE_CHARS // 2
        text = f"{text[:half]}\n[… {len(text) - 2 * half:,} characters …]\n{text[-half:]}"
    calls = "".join(f"\n→ {t.name}({t.arguments[:300]})" for t in m.tool_calls)
    return f"{who}: {text}{calls}"


def _older_calls(middle: Sequence[Message]) -> str:
    """The tool calls the summary replaced, one short line each (the newest 30)."""
    calls = [f"{m.worker or '?'}: {t.name}({t.arguments[:120]})" for m in middle for t in m.tool_calls]
    if not calls:
        return ""
    shown = calls[-30:]
    more = f" (the newest {len(shown)} of {len(calls)})" if len(calls) > len(shown) else ""
    return f"Tool calls in the replaced steps{more}:\n" + "\n".join(f"- {c}" for c in shown)
