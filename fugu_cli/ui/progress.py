"""One-shot runs' progress: one plain line per step (`↳ alpha (p=0.61, 18 ms, prior) · read a.py · $0.0012`),
per failure, compaction and warning, and ultra mode's workflow lines, each step's agent under its own prefix.
With `waiting`, also a line as a turn starts (while a learned router may still be loading) and one as its
first step waits for its worker, so a run is never silent until its first step ends.

Plain strings to a `write` callable: no rich and no prompt_toolkit, so `fugu -p` shows progress without
loading either before its first request (the REPL's renderer writes these same lines through rich).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from fugu_cli.events import (
    Compacted,
    Event,
    Notice,
    ProviderFailed,
    RouteChosen,
    SessionStarted,
    StepFinished,
    StepStarted,
    ToolFinished,
    WorkflowAgentEvent,
)
from fugu_cli.types import RouteDecision
from fugu_cli.ui.phrases import attempt_line, route_reasons, tool_summary, workflow_line


def stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def compacted_line(e: Compacted) -> str:
    """`⇲ compacted (threshold): 26,100 → 5,200 tokens for beta, summary by cheap`."""
    by = f", summary by {e.summarizer}" if e.summarizer else ""
    return f"⇲ compacted ({e.trigger}): {e.tokens_before:,} → {e.tokens_after:,} tokens for {e.worker}{by}"


class ProgressLines:
    """Turns a session's events into progress lines (called from the turn's thread)."""

    def __init__(
        self, write: Callable[[str], None] = stderr_line, prefix: str = "", *, waiting: bool = False
    ) -> None:
        self.write = write
        self.prefix = prefix
        self.waiting = waiting
        self._waited = False  # this turn's first step was announced
        self._route: RouteDecision | None = None
        self._tools: list[str] = []
        self._steps: dict[int, ProgressLines] = {}
        self._lock = threading.RLock()

    def on_event(self, event: Event) -> None:
        with self._lock:
            self._event(event)

    def _event(self, event: Event) -> None:
        if isinstance(event, WorkflowAgentEvent):
            sub = self._steps.get(event.step)
            if sub is None:
                sub = self._steps[event.step] = ProgressLines(self.write, f"{self.prefix}  [{event.step}] ")
            sub.on_event(event.inner)
            return
        line = workflow_line(event) or attempt_line(event)
        if line:
            self._line(line)
        elif isinstance(event, SessionStarted) and self.waiting:
            self._waited = False
            self._line(f"… routing with {event.router} among {', '.join(event.workers)}")
        elif isinstance(event, StepStarted) and self.waiting and not self._waited:
            self._waited = True
            self._line(f"… step {event.step}: waiting for {event.worker}")
        elif isinstance(event, RouteChosen):
            self._route, self._tools = event.decision, []
        elif isinstance(event, ToolFinished):
            r = event.result
            self._tools.append(tool_summary(event.call.name, event.call.arguments, r.is_error, r.exit_code))
        elif isinstance(event, StepFinished) and self._route is not None:
            d = self._route
            head = f"↳ {d.worker} ({', '.join(route_reasons(d))})"
            self._line(" · ".join([head, *self._tools, f"${event.usage.cost_usd:.4f}"]))
        elif isinstance(event, ProviderFailed):
            self._line(f"✗ {event.worker} failed: {event.error}")
        elif isinstance(event, Compacted):
            self._line(compacted_line(event))
        elif isinstance(event, Notice) and event.level in ("warning", "error"):
            self._line(f"! {event.text}")
        elif isinstance(event, Notice) and event.level == "hint":
            self._line(f"· {event.text}")

    def _line(self, text: str) -> None:
        for row in text.splitlines():
            self.write(self.prefix + row)
