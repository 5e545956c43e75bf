"""What surrounds a session's turn: the session-level hooks (SessionStart once per session object and
UserPromptSubmit before any worker sees the prompt, each of which may add context, refuse the prompt or stop
the turn; Stop when the agent would end it, whose reason keeps the agent going) and the turn's clock.

Used by the Session only. Never prints: what a hook says is a Notice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from fugu_cli.events import AssistantMessage, Emit, Event, Notice, ProviderFailed, unwrap
from fugu_cli.hooks import Hooks, HookStop, Site
from fugu_cli.types import Message, TurnResult, Usage


class Refused(Exception):
    """A hook refused the turn's prompt (or stopped the turn) before any worker saw it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TurnHooks:
    """One session's SessionStart, UserPromptSubmit and Stop hooks."""

    def __init__(self, hooks: Hooks | None, session_id: str, resumed: bool) -> None:
        self.hooks = hooks
        self.sid = session_id
        self.resumed = resumed
        self._started = False

    def prompt(self, text: str, site: Site, mode: str, emit: Emit, record: Callable[[Message], None]) -> str:
        """The prompt the model reads (with any context the hooks add); SessionStart's context is recorded
        as a system message. Raises `Refused` when a hook refuses the prompt or stops the turn."""
        hooks = self.hooks
        if not hooks:
            return text
        say = sayer(self.sid, emit)
        try:
            if not self._started:
                self._started = True
                source = "resume" if self.resumed else "startup"
                context = hooks.session_start(source, site, mode, say)
                if context:
                    record(Message(role="system", content=tagged("SessionStart-hook", context)))
            verdict = hooks.user_prompt(text, site, mode, say)
        except HookStop as e:
            raise Refused(f"a hook stopped the turn: {e}") from None
        if verdict.blocked is not None:
            say(f"prompt blocked by a hook: {verdict.blocked}")
            raise Refused(f"the prompt was blocked by a UserPromptSubmit hook: {verdict.blocked}")
        if verdict.context:
            return f"{text}\n\n{tagged('user-prompt-submit-hook', verdict.context)}"
        return text

    def on_stop(
        self, site: Callable[[], Site], mode: str, emit: Emit
    ) -> Callable[[str, bool], str | None] | None:
        """What the agent asks before a final answer ends the turn (None: no Stop hook)."""
        hooks = self.hooks
        if not hooks or not hooks.for_event("Stop"):
            return None

        def on_stop(answer: str, active: bool) -> str | None:
            return hooks.stop(answer, active, site(), mode, sayer(self.sid, emit))

        return on_stop


def refusal(sid: str, reason: str, wall_ms: float) -> TurnResult:
    """The result of a turn a hook refused."""
    return TurnResult(
        status="error_during_execution",
        result=reason,
        session_id=sid,
        num_turns=0,
        usage=Usage(),
        error=reason,
        duration_ms=wall_ms,
    )


def sayer(sid: str, emit: Emit) -> Callable[[str], None]:
    def say(text: str) -> None:
        emit(Notice(session_id=sid, level="warning", text=text))

    return say


def tagged(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


class TurnClock:
    """A turn's wall time, and the time its LLM calls took (every agent's, failed calls included), read
    from the events the turn emits on their way out."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self.api_ms = 0.0

    def emit(self, event: Event) -> None:
        inner = unwrap(event)  # ultra steps' and subagents' calls count too
        if isinstance(inner, AssistantMessage | ProviderFailed):
            with self._lock:  # ultra mode's steps run in threads
                self.api_ms += inner.api_ms
        self._emit(event)

    def wall_ms(self) -> float:
        return (time.monotonic() - self._started) * 1000.0
