"""A fugu-mode session: one conversation in one repository, routed step by step, persisted after every step.

Owns the transcript, the turn counter, per-turn git checkpoints (for /undo), the router-backed picker, the
session-level hooks (SessionStart, UserPromptSubmit, Stop) and the lifetime of its MCP servers (`close`).
Never prints: it emits Events.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.context.budget import usage_lines
from fugu_cli.context.guard import ContextGuard
from fugu_cli.context.instructions import Instructions
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
from fugu_cli.hooks import Hooks, HookStop, Site
from fugu_cli.ledger import Ledger
from fugu_cli.llm.tokens import Window
from fugu_cli.router import Router
from fugu_cli.store import Store
from fugu_cli.types import (
    FallBack,
    Message,
    PermissionMode,
    RouteDecision,
    RouteState,
    TurnResult,
    Usage,
    Worker,
)

if TYPE_CHECKING:
    from fugu_cli.mcp import McpManager  # asyncio and the SDK's wrappers: only a session with servers

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
    trusted: bool = False  # the repository's folder is trusted (its commands' allowed-tools count)
    slash_commands: tuple[str, ...] = ()  # the custom commands found at start (for system/init)


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
    hooks: Hooks | None = None  # SessionStart, UserPromptSubmit and Stop (tool hooks run in the agent)
    mcp: McpManager | None = None  # the session's MCP servers, stopped by `close`
    instructions: Instructions | None = None  # the AGENTS.md / CLAUDE.md files loaded (for /memory)


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
        self._resumed = bool(self.messages)
        self._session_hooks_ran = False
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
            self._say_mcp(emit)
            store = self.deps.store
            try:
                prompt = self._prompt_hooks(text, turn, emit)
            except _Refused as refused:  # the prompt is not kept: a hook may refuse it for what it holds
                result = _refusal(self.id, refused.reason, clock.wall_ms())
                store.begin_turn(self.id, turn, "[refused by a hook]")
                store.finish_turn(self.id, turn, result.status, result.result, 0.0)
                emit(TurnFinished(session_id=self.id, result=result))
                return result
            store.begin_turn(self.id, turn, text)
            store.touch_session(self.id, title=text.strip().splitlines()[0][:80] if text else None)
            self._append(Message(role="user", content=prompt))
            checkpoint = self._checkpointer(turn, emit)
            deps = dataclasses.replace(
                self.deps.agent,
                tool_ctx=dataclasses.replace(self.deps.agent.tool_ctx, before_edit=checkpoint),
            )

            on_stop = self._stop_hooks(turn, emit)

            def fugu_turn() -> TurnResult:
                brief = self.repo_map_text()
                return Agent(deps).run(
                    self.messages,
                    turn,
                    self._picker(emit),
                    self.config.limits,
                    io,
                    brief=brief,
                    on_stop=on_stop,
                )

            if self.ultra and self.deps.ultra is not None:
                outcome = self.deps.ultra.run_turn(
                    prompt, turn, io, before_apply=checkpoint, record=self._append
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

    # --- extensions: hooks around the turn, MCP servers' lifetime, per-turn settings -----------------------

    def _prompt_hooks(self, text: str, turn: int, emit: Emit) -> str:
        """Run SessionStart (once per session object) and UserPromptSubmit hooks; the prompt the model reads
        (with any context they add). Raises _Refused when a hook refuses the prompt or stops the turn."""
        hooks = self.deps.hooks
        if not hooks:
            return text
        site = Site(self.ledger.turn(turn), 0, "user")
        mode = self.config.permission_mode
        say = _sayer(self.id, emit)
        try:
            if not self._session_hooks_ran:
                self._session_hooks_ran = True
                source = "resume" if self._resumed else "startup"
                context = hooks.session_start(source, site, mode, say)
                if context:
                    self._append(Message(role="system", content=_tagged("SessionStart-hook", context)))
            verdict = hooks.user_prompt(text, site, mode, say)
        except HookStop as e:
            raise _Refused(f"a hook stopped the turn: {e}") from None
        if verdict.blocked is not None:
            emit(
                Notice(
                    session_id=self.id, level="warning", text=f"prompt blocked by a hook: {verdict.blocked}"
                )
            )
            raise _Refused(f"the prompt was blocked by a UserPromptSubmit hook: {verdict.blocked}")
        if verdict.context:
            return f"{text}\n\n{_tagged('user-prompt-submit-hook', verdict.context)}"
        return text

    def _stop_hooks(self, turn: int, emit: Emit) -> Callable[[str, bool], str | None] | None:
        hooks = self.deps.hooks
        if not hooks or not hooks.for_event("Stop"):
            return None

        def on_stop(answer: str, active: bool) -> str | None:
            site = Site(self.ledger.turn(turn), 0, "user")
            return hooks.stop(answer, active, site, self.config.permission_mode, _sayer(self.id, emit))

        return on_stop

    def _say_mcp(self, emit: Emit) -> None:
        if self.deps.mcp is not None:
            for notice in self.deps.mcp.take_notices():
                emit(Notice(session_id=self.id, level="warning", text=notice))

    @contextmanager
    def turn_settings(self, worker: str | None = None, allow: Sequence[str] = ()) -> Iterator[None]:
        """For the turns run inside: force `worker` and allow `allow` too (a custom command's front matter);
        afterwards the session's own settings are back ("always" answers given meanwhile stay)."""
        policy = self.deps.agent.tool_ctx.policy
        before = self.config.forced_worker
        added = [rule for rule in allow if rule not in policy.allow]
        if worker:
            self.set_worker(worker)
        policy.allow.extend(added)
        try:
            yield
        finally:
            # only what this put in place: a /model or set_model meanwhile (another thread) stands
            if worker and self.config.forced_worker == worker:
                self.config.forced_worker = before
            for rule in added:
                if rule in policy.allow:
                    policy.allow.remove(rule)

    def close(self) -> None:
        """End the session's processes: its MCP servers stop. The session's record stays in the store."""
        if self.deps.mcp is not None:
            self.deps.mcp.close()

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
            mcp_servers=self.mcp_servers(),
            slash_commands=(*self.config.slash_commands, *self.mcp_prompts()),
        )

    def mcp_servers(self) -> tuple[tuple[str, str], ...]:
        """(name, status) of each MCP server, in Claude Code's words: connected, pending, failed (and
        stopped, once the session is closed)."""
        if self.deps.mcp is None:
            return ()
        words = {
            "running": "connected",
            "not started": "pending",
            "starting": "pending",
            "stopped": "stopped",
        }
        return tuple((s.name, words.get(s.state, "failed")) for s in self.deps.mcp.status())

    def mcp_prompts(self) -> tuple[str, ...]:
        """`mcp__server__prompt` for each prompt the servers are known to offer (no server is started)."""
        if self.deps.mcp is None:
            return ()
        from fugu_cli.mcp import qualified

        catalogs = self.deps.mcp.catalogs(start=False)
        return tuple(qualified(server, p.name) for server, c in catalogs.items() for p in c.prompts)

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
            from fugu_cli.tools import checkpoints, git

            try:
                self.checkpoints[turn] = checkpoints.save(self.config.root, f"{self.id}-t{turn}")
                if not self._pruned:  # once per session is enough
                    self._pruned = True
                    keep = self.config.keep_checkpoint_sessions
                    checkpoints.prune(self.config.root, keep, keep=frozenset({self.id}))
                    git.prune_checkpoints(self.config.root, keep, keep=frozenset({self.id}))  # ultra's bases
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
                from fugu_cli.tools import checkpoints

                restored = checkpoints.restore(self.config.root, sha)
                if restored:
                    return restored
        raise UsageError("nothing to undo: no turn of this session has changed files")


class _Refused(Exception):
    """A hook refused the turn's prompt (or stopped the turn) before any worker saw it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _refusal(sid: str, reason: str, wall_ms: float) -> TurnResult:
    return TurnResult(
        status="error_during_execution",
        result=reason,
        session_id=sid,
        num_turns=0,
        usage=Usage(),
        error=reason,
        duration_ms=wall_ms,
    )


def _sayer(sid: str, emit: Emit) -> Callable[[str], None]:
    def say(text: str) -> None:
        emit(Notice(session_id=sid, level="warning", text=text))

    return say


def _tagged(tag: str, text: str) -> str:
    return f"<{tag}>\n{text}\n</{tag}>"


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
