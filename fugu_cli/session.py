"""A fugu-mode session: one conversation in one repository, routed step by step, persisted after every step.

Owns the transcript, the turn counter, per-turn git checkpoints (for /undo) and the router-backed picker.
Never prints: it emits Events.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.context.budget import usage_lines
from fugu_cli.context.guard import ContextGuard
from fugu_cli.errors import UsageError
from fugu_cli.events import (
    AssistantMessage,
    Compacted,
    Emit,
    Event,
    Notice,
    ProviderFailed,
    SessionStarted,
    TurnFinished,
    WorkflowAgentEvent,
    ignore,
)
from fugu_cli.ledger import Ledger
from fugu_cli.llm.tokens import Window
from fugu_cli.router import Router
from fugu_cli.store import Store
from fugu_cli.types import FallBack, Message, PermissionMode, RouteDecision, RouteState, TurnResult, Worker

log = logging.getLogger("fugu")


@dataclass
class SessionConfig:
    root: Path
    limits: Limits = field(default_factory=Limits)
    forced_worker: str | None = None  # `/worker NAME` (sticky) or --worker
    system_prompt: str = ""
    permission_mode: str = "ask"
    router_name: str = "prior"
    ultra: bool = False  # turns go to `SessionDeps.ultra` (the conductor); `/ultra on|off` flips it
    stream: bool = False  # stream the workers' text (a terminal); a turn may say otherwise
    notices: tuple[str, ...] = ()  # said once, at the first turn (e.g. what an untrusted config could not do)
    hints: tuple[str, ...] = ()  # likewise, but advice rather than a warning
    keep_checkpoint_sessions: int = 20  # /undo checkpoint refs of older sessions are pruned


class UltraMode(Protocol):
    """Ultra mode as the session sees it (fugu_cli.conductor.Conductor). It either runs the turn as a workflow
    or says it could not plan one (`FallBack`), and the session runs the turn in fugu mode."""

    def run_turn(
        self,
        text: str,
        turn: int,
        io: TurnIO,
        *,
        before_apply: Callable[[], None] | None = None,
        record: Callable[[Message], None] = ...,
    ) -> TurnResult | FallBack: ...


@dataclass(frozen=True)
class SessionDeps:
    """The agent's parts plus the store, the pool and the routers."""

    agent: AgentDeps
    store: Store
    pool: tuple[Worker, ...]
    router: Router
    fallback: Router
    ultra: UltraMode | None = None
    repo_map: Callable[[Sequence[Message]], str] | None = None  # the map given at the start of each turn


class Session:
    def __init__(self, deps: SessionDeps, config: SessionConfig, messages: Sequence[Message] = ()) -> None:
        self.deps = deps
        self.config = config
        self.id = deps.agent.session_id
        self.messages: list[Message] = list(messages)
        self.turn = self._last_turn()
        self.checkpoints: dict[int, str] = deps.store.checkpoints(self.id)
        self._lock = threading.Lock()
        self._pruned = False
        if not self.messages and config.system_prompt:
            self._append(Message(role="system", content=config.system_prompt))
        self._seen = self.ledger.message_count()  # stored messages this session object has caught up with

    @property
    def ledger(self) -> Ledger:
        return self.deps.agent.ledger

    @property
    def workers(self) -> dict[str, Worker]:
        return {w.name: w for w in self.deps.pool}

    @property
    def ultra(self) -> bool:
        return self.config.ultra

    @ultra.setter
    def ultra(self, on: bool) -> None:
        """Switch ultra mode for the following turns (`/ultra on|off`)."""
        if on and self.deps.ultra is None:
            raise UsageError("ultra mode is not available in this session (no conductor was built)")
        self.config.ultra = on

    def set_permission_mode(self, mode: PermissionMode) -> None:
        """Change what tools may do from the next tool call on."""
        self.deps.agent.tool_ctx.policy.mode = mode
        self.config.permission_mode = mode

    def set_worker(self, name: str | None) -> None:
        """Force a worker for the following steps (None: back to the router)."""
        if name is not None and name not in self.workers:
            raise UsageError(
                f"no worker named {name!r} in the pool; choose one of: {', '.join(self.workers)}"
            )
        self.config.forced_worker = name

    def run_turn(
        self,
        text: str,
        emit: Emit = ignore,
        cancel: threading.Event | None = None,
        *,
        stream: bool | None = None,
    ) -> TurnResult:
        """Handle one user message to a final answer (or a limit, a failure, an interrupt)."""
        with self._lock, self.deps.store.session_lock(self.id):
            self._catch_up()
            self.turn += 1
            turn = self.turn
            clock = _TurnClock(emit)
            emit = clock.emit
            io = TurnIO(emit=emit, cancel=cancel, stream=self.config.stream if stream is None else stream)
            emit(self._started())
            for notice in self.config.notices:
                emit(Notice(session_id=self.id, level="warning", text=notice))
            for hint in self.config.hints:
                emit(Notice(session_id=self.id, level="hint", text=hint))
            self.config.notices = self.config.hints = ()
            store = self.deps.store
            store.begin_turn(self.id, turn, text)
            store.touch_session(self.id, title=text.strip().splitlines()[0][:80] if text else None)
            self._append(Message(role="user", content=text))
            checkpoint = self._checkpointer(turn, emit)
            deps = dataclasses.replace(
                self.deps.agent,
                tool_ctx=dataclasses.replace(self.deps.agent.tool_ctx, before_edit=checkpoint),
            )

            def fugu_turn() -> TurnResult:
                brief = self.repo_map_text()
                return Agent(deps).run(
                    self.messages, turn, self._picker(emit), self.config.limits, io, brief=brief
                )

            if self.ultra and self.deps.ultra is not None:
                outcome = self.deps.ultra.run_turn(
                    text, turn, io, before_apply=checkpoint, record=self._append
                )
                if isinstance(outcome, FallBack):
                    emit(Notice(session_id=self.id, level="warning", text=outcome.reason))
                    outcome = outcome.merged(fugu_turn())
                result = outcome
            else:
                result = fugu_turn()
            result = dataclasses.replace(result, duration_ms=clock.wall_ms(), duration_api_ms=clock.api_ms)
            store.finish_turn(self.id, turn, result.status, result.result, result.usage.cost_usd)
            self._seen = self.ledger.message_count()
            emit(TurnFinished(session_id=self.id, result=result))
            return result

    def _started(self) -> SessionStarted:
        forced = self.workers.get(self.config.forced_worker or "")
        keys = sorted({w.api_key_env for w in self.deps.pool if w.api_key_env})
        return SessionStarted(
            session_id=self.id,
            cwd=str(self.config.root),
            workers=tuple(self.workers),
            tools=tuple(self.deps.agent.tools.names()),
            permission_mode=self.config.permission_mode,
            router=self.config.router_name,
            model=forced.model if forced else "auto",
            api_key_source=",".join(keys) or "none",
        )

    def repo_map_text(self) -> str:
        """The repo map for the transcript as it stands ('' when the map is off or finds nothing)."""
        if self.deps.repo_map is None:
            return ""
        try:
            return self.deps.repo_map(self.messages)
        except Exception as e:  # a broken map must not cost the turn
            log.warning("repo map failed", exc_info=e)
            return ""

    def context_used(self) -> list[tuple[str, int, Window]]:
        """(worker, tokens the next request would carry, its window) for each worker of the pool."""
        policy = self.deps.agent.context
        if policy is None:
            return []
        schemas = self.deps.agent.tools.schemas()
        return usage_lines(policy, self.deps.pool, self.messages, schemas)

    def compact(self, focus: str = "", emit: Emit = ignore) -> Compacted | None:
        """`/compact [focus]`: replace every step but the last by a summary now. None when there was nothing
        to replace."""
        agent = self.deps.agent
        if agent.context is None:
            raise UsageError("this session keeps no token accounts, so it cannot compact")
        with self._lock, self.deps.store.session_lock(self.id):
            self._catch_up()
            steps = self.ledger.steps()
            names = {w.name: w for w in self.deps.pool}
            target = names.get(steps[-1].worker) if steps else None
            guard = ContextGuard(
                agent.context,
                agent.llm,
                self.deps.pool,
                agent.tools.schemas(),
                self.ledger.turn(self.turn),
                self.config.root,
            )
            target = target or guard.roomiest(())
            done = guard.compact(self.messages, target, "user", focus=focus, keep_tokens=0)
            self._seen = self.ledger.message_count()
        if done is None:
            return None
        event = done.event(self.id)
        emit(event)
        return event

    def _picker(self, emit: Emit) -> Callable[[RouteState], RouteDecision]:
        def pick(state: RouteState) -> RouteDecision:
            pool = self.deps.pool
            try:
                decision = self.deps.router.pick(state, pool)
            except LookupError:
                raise
            except Exception as e:  # a broken router must not end the session: the prior takes over
                log.warning("router failed", exc_info=e)
                emit(
                    Notice(session_id=self.id, level="warning", text=f"router failed ({e}); using the prior")
                )
                decision = self.deps.fallback.pick(state, pool)
            forced = self.config.forced_worker
            if forced and forced not in state.excluded:
                return dataclasses.replace(
                    decision, worker=forced, source="override", reason="forced by the user"
                )
            if state.failover:
                failed = ", ".join(sorted(state.excluded))
                return dataclasses.replace(decision, source="fallback", reason=f"{failed} failed")
            return decision

        return pick

    def _catch_up(self) -> None:
        """Another process may have run turns of this session since we loaded it: continue from there."""
        count = self.ledger.message_count()
        if count > self._seen:
            self.messages = self.ledger.transcript()
            self.turn = max(self.turn, self._last_turn())
            self._seen = count

    def add_context(self, messages: Sequence[Message]) -> None:
        """Add earlier conversation (an API client's history) to the transcript, persisted like a turn."""
        for message in messages:
            self._append(message)

    def _append(self, message: Message) -> None:
        self.messages.append(message)
        self.ledger.turn(self.turn).message(message)

    def _last_turn(self) -> int:
        """The last turn stored (a compacted transcript no longer holds every turn's message)."""
        return max(self.deps.store.last_turn(self.id), sum(1 for m in self.messages if m.role == "user"))

    def _checkpointer(self, turn: int, emit: Emit) -> Callable[[], None]:
        def checkpoint() -> None:
            if turn in self.checkpoints:
                return
            from fugu_cli.tools import git

            try:
                self.checkpoints[turn] = git.checkpoint(self.config.root, f"{self.id}-t{turn}")
                if not self._pruned:  # once per session is enough
                    self._pruned = True
                    keep = self.config.keep_checkpoint_sessions
                    git.prune_checkpoints(self.config.root, keep, keep=frozenset({self.id}))
            except Exception as e:  # not a git repo, or git missing: edits go on, /undo can't help
                emit(Notice(session_id=self.id, level="warning", text=f"no checkpoint for /undo: {e}"))
                self.checkpoints[turn] = ""
            self.deps.store.set_checkpoint(self.id, turn, self.checkpoints[turn])

        return checkpoint

    def undo(self) -> list[str]:
        """Restore the tree to its state before the last turn that changed it. Returns the restored paths.

        A turn whose checkpoint matches the tree (it only ran commands that changed nothing) is skipped.
        """
        for turn in sorted(self.checkpoints, reverse=True):
            sha = self.checkpoints.pop(turn)
            self.deps.store.set_checkpoint(self.id, turn, None)
            if sha:
                from fugu_cli.tools import git

                restored = git.restore_checkpoint(self.config.root, sha)
                if restored:
                    return restored
        raise UsageError("nothing to undo: no turn of this session has changed files")


class _TurnClock:
    """A turn's wall time, and the time its LLM calls took (every agent's, failed calls included), read
    from the events the turn emits on their way out."""

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self.api_ms = 0.0

    def emit(self, event: Event) -> None:
        inner = event
        while isinstance(inner, WorkflowAgentEvent):
            inner = inner.inner
        if isinstance(inner, AssistantMessage | ProviderFailed):
            with self._lock:  # ultra mode's steps run in threads
                self.api_ms += inner.api_ms
        self._emit(event)

    def wall_ms(self) -> float:
        return (time.monotonic() - self._started) * 1000.0
