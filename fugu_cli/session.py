"""A fugu-mode session: one conversation in one repository, routed step by step, persisted after every step.

Owns the transcript, the turn counter, the settings each turn runs under (`TurnSettings`, changed only
through its methods, snapshotted when a turn starts), per-turn git checkpoints (for /undo), the router-backed
picker, the session-level hooks (SessionStart, UserPromptSubmit, Stop) and the lifetime of its MCP servers
(`close`). The UI reads and changes a session through its methods, never through its deps.
Never prints: it emits Events.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from fugu_cli.agent import Agent, AgentDeps, Limits, OnStop, TurnIO
from fugu_cli.checkpoints import Checkpoints
from fugu_cli.context.budget import usage_lines
from fugu_cli.context.guard import ContextGuard
from fugu_cli.context.instructions import InstructionFile, Instructions
from fugu_cli.custom_agents import GENERAL, AgentSpec
from fugu_cli.errors import ToolArgumentError, UsageError
from fugu_cli.events import (
    Compacted,
    Emit,
    Event,
    Notice,
    SessionStarted,
    TurnFinished,
    ignore,
)
from fugu_cli.hooks import Hooks, Site
from fugu_cli.ledger import Ledger
from fugu_cli.llm.tokens import Window
from fugu_cli.router import Router
from fugu_cli.store import CompactionRecord, EditCheckpointRow, SessionRow, Store
from fugu_cli.subagents import Delegation, Staff, SubagentLimits, offer
from fugu_cli.turn_hooks import Refused, TurnClock, TurnHooks, refusal
from fugu_cli.turn_settings import Check, Overrides, SettingsBox, TurnSettings
from fugu_cli.types import (
    FallBack,
    Image,
    Message,
    PermissionMode,
    RouteDecision,
    RouteState,
    TurnResult,
    Worker,
    image_note,
)

if TYPE_CHECKING:
    from fugu_cli.mcp import McpManager  # asyncio and the SDK's wrappers: only a session with servers
    from fugu_cli.tools.background import BackgroundShells, ShellInfo

log = logging.getLogger("fugu")
ULTRA_UNCHECKED = "the check judges fugu-mode turns only: this ultra-mode turn is not checked"
_TURN_ONLY = ("task", "exit_plan_mode")  # a fugu-mode turn's own agent's: ultra mode's steps never get them


@dataclass(frozen=True)
class SessionConfig:
    root: Path
    settings: TurnSettings = field(default_factory=TurnSettings)  # the first turn's; the session changes them
    system_prompt: str = ""
    router_name: str = "prior"
    stream: bool = False  # stream the workers' text (a terminal); a turn may say otherwise
    notices: tuple[str, ...] = ()  # said once, at the first turn (e.g. what an untrusted config could not do)
    hints: tuple[str, ...] = ()  # likewise, but advice rather than a warning
    keep_checkpoint_sessions: int = 20  # /undo checkpoint refs of older sessions are pruned
    trusted: bool = False  # the repository's folder is trusted (its commands' allowed-tools count)
    slash_commands: tuple[str, ...] = ()  # the custom commands found at start (for system/init)
    agents: Mapping[str, AgentSpec] = field(default_factory=lambda: {GENERAL.name: GENERAL})  # for `task`
    subagents: SubagentLimits = field(default_factory=SubagentLimits)


class UltraMode(Protocol):
    """Ultra mode as the session sees it (fugu_cli.conductor.Conductor). It either runs the turn as a workflow
    or says it could not plan one (`FallBack`), and the session runs the turn in fugu mode."""

    def run_turn(
        self,
        text: str,
        turn: int,
        io: TurnIO,
        *,
        agent: AgentDeps | None = None,
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
    # the map given at the start of each turn (of the repository and the folders added beside it)
    repo_map: Callable[[Sequence[Message], Sequence[Path]], str] | None = None
    hooks: Hooks | None = None  # SessionStart, UserPromptSubmit and Stop (tool hooks run in the agent)
    mcp: McpManager | None = None  # the session's MCP servers, stopped by `close`
    instructions: Instructions | None = None  # the AGENTS.md / CLAUDE.md files loaded (for /memory)
    observers: tuple[Emit, ...] = ()  # see every event of every turn too (telemetry export)
    background: BackgroundShells | None = None  # the session's background commands, killed by `close`


class Session:
    def __init__(self, deps: SessionDeps, config: SessionConfig, messages: Sequence[Message] = ()) -> None:
        self.deps = deps
        self.config = config
        self.id = deps.agent.session_id
        self.messages: list[Message] = list(messages)
        self.turn = self._last_turn()
        self.checkpoints = Checkpoints(deps.store, self.id, config.root, config.keep_checkpoint_sessions)
        self._lock = threading.Lock()  # one turn (or compaction) at a time
        self._settings = SettingsBox(config.settings)
        self._told = False  # the notices and hints were said (at the first turn)
        self._hooks = TurnHooks(deps.hooks, self.id, resumed=bool(self.messages))
        if not self.messages and config.system_prompt:
            self._append(Message(role="system", content=config.system_prompt))
        self._seen = self.ledger.message_count()  # stored messages this session object has caught up with

    @property
    def ledger(self) -> Ledger:
        return self.deps.agent.ledger

    @property
    def workers(self) -> dict[str, Worker]:
        return {w.name: w for w in self.deps.pool}

    # --- what the UI reads and changes (from any thread) ----------------------------------------------------

    def settings(self) -> TurnSettings:
        """What the next turn runs under (a snapshot)."""
        return self._settings.get()

    @property
    def ultra(self) -> bool:
        return self.settings().ultra

    def set_ultra(self, on: bool) -> None:
        """Switch ultra mode for the following turns (`/ultra on|off`)."""
        if on and self.deps.ultra is None:
            raise UsageError("ultra mode is not available in this session (no conductor was built)")
        self._settings.set_ultra(on)

    def set_permission_mode(self, mode: PermissionMode) -> None:
        """Change what tools may do from the next turn on."""
        self._settings.set_mode(mode)

    def set_planning(self, on: bool) -> None:
        """Plan mode from the next turn (`/plan`): read-only until the user approves the workers' plan."""
        self._settings.set_planning(on)

    def set_worker(self, name: str | None) -> None:
        """Force a worker for the following turns (None: back to the router)."""
        self._check_worker(name)
        self._settings.set_worker(name)

    def set_check(self, command: str | None) -> None:
        """Judge the following turns' attempts by `command` (`/check CMD`; None: no check). A command that
        cannot work is refused (UsageError)."""
        if command is None:
            self._settings.set_check(None)
            return
        from fugu_cli.tools.verify import resolve, validate

        now = self.settings().check
        command = resolve(command, self.config.root)
        check = Check(command, now.timeout_s) if now else Check(command)
        validate(check.command, self.config.root, self.deps.agent.tool_ctx.sandbox)
        self._settings.set_check(check)

    def grant(self, prefix: str) -> None:
        """The user answered "always" for `prefix`: allowed in every later turn of this session."""
        self._settings.grant(prefix)

    def add_dir(self, folder: Path) -> Path:
        """Let the following turns' tools reach `folder` beside the repository (`/add-dir`): readable, and
        writable as the repository is. Returns it resolved."""
        from fugu_cli.options import added_dir

        found = added_dir(folder, self.config.root)
        self._settings.add_dir(found)
        if self.deps.instructions is not None:
            self.deps.instructions.add_root(found)
        return found

    def roots(self) -> tuple[Path, ...]:
        """The repository and the folders added beside it."""
        return (self.config.root, *self.settings().dirs)

    @property
    def pool(self) -> tuple[Worker, ...]:
        return self.deps.pool

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def router_name(self) -> str:
        return self.config.router_name

    @property
    def trusted(self) -> bool:
        """Whether the repository's folder is trusted (its custom commands' allowed-tools count)."""
        return self.config.trusted

    @property
    def mcp(self) -> McpManager | None:
        """The session's MCP servers (None without any)."""
        return self.deps.mcp

    def warm(self) -> None:
        """Slow one-time set-up (litellm's import) now, e.g. while the user types."""
        self.deps.agent.llm.warm(self.deps.pool)  # litellm only if a worker needs it

    def recent_sessions(self, limit: int = 20) -> list[SessionRow]:
        return self.deps.store.list_sessions(limit)

    def instruction_files(self) -> tuple[list[InstructionFile], int]:
        """The instruction files loaded (AGENTS.md, CLAUDE.md, ...) and their token budget."""
        found = self.deps.instructions
        return (list(found.files), found.budget) if found else ([], 0)

    def memory_text(self) -> str:
        """What ultra mode's agents learned in this session (`/memory`)."""
        from fugu_cli import memory

        return memory.render(self.deps.store, self.id)

    def worker_health(self) -> dict[str, str]:
        """{worker: why it is skipped or probed} for the pool's workers that failed recently."""
        health = self.deps.agent.calls.health
        now = health.clock()
        return {name: c.describe(now) for name, c in health.report(self.deps.pool).items()}

    def _check_worker(self, name: str | None) -> None:
        if name is not None and name not in self.workers:
            raise UsageError(
                f"no worker named {name!r} in the pool; choose one of: {', '.join(self.workers)}"
            )

    # --- turns ----------------------------------------------------------------------------------------------

    def run_turn(
        self,
        text: str,
        emit: Emit = ignore,
        cancel: threading.Event | None = None,
        *,
        stream: bool | None = None,
        overrides: Overrides | None = None,
        images: Sequence[Image] = (),
    ) -> TurnResult:
        """Handle one user message to a final answer (or a limit, a failure, an interrupt), under the
        session's settings as they are now (plus `overrides`, for this turn only). `images` go with the
        message (its text notes them) to a worker that can see them."""
        if images:
            text = f"{text}\n\n{image_note(images)}"
        settings = self.settings()
        if overrides is not None:
            self._check_worker(overrides.worker)
            settings = overrides.applied(settings)
        with self._lock, self.deps.store.session_lock(self.id):
            self._catch_up()
            self.turn += 1
            clock = TurnClock(_observed(emit, self.deps.observers))
            io = TurnIO(
                emit=clock.emit, cancel=cancel, stream=self.config.stream if stream is None else stream
            )
            io.emit(self._started(settings))
            self._tell(io.emit)
            result = self._work(text, self.turn, settings, io, clock, tuple(images))
            result = dataclasses.replace(result, duration_ms=clock.wall_ms(), duration_api_ms=clock.api_ms)
            self.deps.store.finish_turn(
                self.id, self.turn, result.status, result.result, result.usage.cost_usd
            )
            self._seen = self.ledger.message_count()
            io.emit(TurnFinished(session_id=self.id, result=result))
            return result

    def _work(
        self,
        text: str,
        turn: int,
        settings: TurnSettings,
        io: TurnIO,
        clock: TurnClock,
        images: tuple[Image, ...] = (),
    ) -> TurnResult:
        """The turn itself: its prompt through the hooks, then the agent (or the conductor in ultra mode)
        with this turn's parts: the settings' policy, this session's checkpoint and grants."""
        store, emit = self.deps.store, io.emit
        site = Site(self.ledger.turn(turn), 0, "user")
        try:
            prompt = self._hooks.prompt(text, site, settings.mode, emit, self._append)
        except Refused as refused:  # the prompt is not kept: a hook may refuse it for what it holds
            store.begin_turn(self.id, turn, "[refused by a hook]")
            return refusal(self.id, refused.reason, clock.wall_ms())
        store.begin_turn(self.id, turn, text)
        store.touch_session(self.id, title=text.strip().splitlines()[0][:80] if text else None)
        self._append(Message(role="user", content=prompt, images=images))
        checkpoint = self.checkpoints.before_edit(turn, emit)
        tool_ctx = dataclasses.replace(
            self.deps.agent.tool_ctx,
            before_edit=checkpoint,
            after_edit=self.checkpoints.after_edit(turn, emit),
            policy=settings.policy,
            grant=self.grant,
            background=self.deps.background,
            leave_plan=self._plan_approved if settings.planning else None,
        ).with_dirs(settings.dirs)
        tools = self.deps.agent.tools
        if self.deps.background is None:
            tools = tools.filtered(lambda n: n not in ("shell_output", "shell_kill"))
        deps = dataclasses.replace(self.deps.agent, tool_ctx=tool_ctx, tools=tools)
        on_stop = self._hooks.on_stop(lambda: site, settings.mode, emit)

        def fugu_turn() -> TurnResult:
            if settings.check is not None:
                return self._attempts(deps, turn, settings, io, on_stop)
            pick = self._picker(emit, settings.worker)
            brief = "\n\n".join(t for t in (self._plan_note(settings), self.repo_map_text()) if t)
            result = Agent(self._staffed(deps, turn, io, settings.planning)).run(
                self.messages, turn, pick, settings.limits, io, brief=brief, on_stop=on_stop
            )
            return self._with_test_evidence(result, turn, emit)

        if not settings.ultra or self.deps.ultra is None:
            return fugu_turn()
        if settings.check is not None:
            emit(Notice(session_id=self.id, level="warning", text=ULTRA_UNCHECKED))
        steps = dataclasses.replace(deps, tools=deps.tools.filtered(lambda n: n not in _TURN_ONLY))
        outcome = self.deps.ultra.run_turn(
            prompt, turn, io, agent=steps, before_apply=checkpoint, record=self._append
        )
        if isinstance(outcome, FallBack):
            emit(Notice(session_id=self.id, level="warning", text=outcome.reason))
            return outcome.merged(fugu_turn())
        return outcome

    # --- attempts and their evidence (fugu_cli/attempts.py) -----------------------------------------------

    def _attempts(
        self, deps: AgentDeps, turn: int, settings: TurnSettings, io: TurnIO, on_stop: OnStop | None
    ) -> TurnResult:
        """The turn as attempts judged by the settings' check: each by one worker, the next chosen by the
        escalation after a failed check."""
        from fugu_cli.attempts import Attempts, AttemptsDeps, attempt_picker, escalation, evidence

        assert settings.check is not None
        budget = settings.limits.max_budget_usd

        def attempt(decision: RouteDecision, number: int, limits: Limits) -> TurnResult:
            known = evidence(run.records, budget)
            pick = attempt_picker(self._picker(io.emit, None), decision, number, known)
            brief = "\n\n".join(t for t in (self._plan_note(settings), self.repo_map_text()) if t)
            before = sum(r.num_turns for r in run.results)
            return Agent(self._staffed(deps, turn, io, settings.planning)).run(
                self.messages, turn, pick, limits, io, brief=brief, on_stop=on_stop, steps_before=before
            )

        run = Attempts(
            AttemptsDeps(
                check=settings.check,
                root=self.config.root,
                sandbox=deps.tool_ctx.sandbox,
                session_id=self.id,
                turn=turn,
                ledger=self.ledger.turn(turn),
                limits=settings.limits,
                io=io,
                attempt=attempt,
                escalate=escalation(
                    self.deps.router,
                    self.deps.fallback,
                    self.deps.pool,
                    lambda: self.messages,
                    (settings.worker, budget),
                    lambda text: io.emit(Notice(session_id=self.id, level="warning", text=text)),
                ),
                checkpoint=lambda: self.checkpoints.taken.get(turn),
                record=self._append,
            )
        )
        return run.run()

    def _with_test_evidence(self, result: TurnResult, turn: int, emit: Emit) -> TurnResult:
        """A turn without a check: the last test command the worker ran itself is its attempt's evidence."""
        from fugu_cli.attempts import own_test_evidence
        from fugu_cli.events import AttemptChecked

        record = own_test_evidence(result, self.ledger.tool_calls(turn))
        if record is None:
            return result
        self.ledger.turn(turn).attempt(1, record)
        emit(AttemptChecked(session_id=self.id, attempt=1, record=record))
        return dataclasses.replace(result, attempts=(record,))

    def _plan_note(self, settings: TurnSettings) -> str:
        from fugu_cli import prompts

        return prompts.load("plan_mode") if settings.planning else ""

    def _plan_approved(self, mode: PermissionMode) -> None:
        """The user approved the plan: the turn goes on in `mode`, and so do the following turns."""
        self._settings.set_mode(mode, planning=False)

    def _staffed(self, deps: AgentDeps, turn: int, io: TurnIO, planning: bool) -> AgentDeps:
        """The turn's agent with its `task` tool: subagents the router staffs (the user's forced worker is
        the turn's own; a custom agent may name its worker), offered by name and description. Without
        subagents (`[subagents] max_depth = 0`, or `--tools` left `task` out) the tool is not offered."""
        limits, agents = self.config.subagents, self.config.agents
        if not planning:
            deps = dataclasses.replace(deps, tools=deps.tools.filtered(lambda n: n != "exit_plan_mode"))
        if limits.max_depth < 1 or "task" not in deps.tools.names():
            return dataclasses.replace(deps, tools=deps.tools.filtered(lambda n: n != "task"))
        deps = dataclasses.replace(deps, tools=offer(deps.tools, agents))
        pick = self._picker(io.emit, None)
        staff = Staff(deps, pick, agents, limits, io, self.config.system_prompt, turn)
        tool_ctx = dataclasses.replace(deps.tool_ctx, delegate=Delegation(staff, io.emit))
        return dataclasses.replace(deps, tool_ctx=tool_ctx)

    def todo_arguments(self) -> str | None:
        """The arguments of the last todo list the workers wrote in this session (None: none yet); the
        ledger keeps it, so it survives `--continue`."""
        done = [c for c in self.ledger.tool_calls() if c.tool == "todo_write" and not c.is_error]
        return done[-1].arguments if done else None

    def background_shells(self) -> list[ShellInfo]:
        """The session's background commands, running or done (`/ps`)."""
        return self.deps.background.list() if self.deps.background is not None else []

    def stop_shell(self, shell_id: str) -> ShellInfo:
        """Stop a background command (`/stop ID`)."""
        if self.deps.background is None:
            raise UsageError("this session runs no background commands")
        try:
            return self.deps.background.kill(shell_id)
        except ToolArgumentError as e:
            raise UsageError(str(e)) from None

    def _tell(self, emit: Emit) -> None:
        """Say the session's notices and hints once (at its first turn), and what its MCP servers report."""
        if not self._told:
            self._told = True
            for notice in self.config.notices:
                emit(Notice(session_id=self.id, level="warning", text=notice))
            for hint in self.config.hints:
                emit(Notice(session_id=self.id, level="hint", text=hint))
        self._say_mcp(emit)

    # --- extensions: MCP servers' lifetime and what they offer ------------------------------------------

    def _say_mcp(self, emit: Emit) -> None:
        if self.deps.mcp is not None:
            for notice in self.deps.mcp.take_notices():
                emit(Notice(session_id=self.id, level="warning", text=notice))

    def close(self) -> None:
        """End the session's processes: its background commands are killed, its MCP servers stop. The
        session's record stays in the store."""
        if self.deps.background is not None:
            self.deps.background.close()
        if self.deps.mcp is not None:
            self.deps.mcp.close()

    def _started(self, settings: TurnSettings) -> SessionStarted:
        forced = self.workers.get(settings.worker or "")
        keys = sorted({w.api_key_env for w in self.deps.pool if w.api_key_env})
        return SessionStarted(
            session_id=self.id,
            cwd=str(self.config.root),
            workers=tuple(self.workers),
            tools=tuple(
                n for n in self.deps.agent.tools.names() if n != "exit_plan_mode" or settings.planning
            ),
            permission_mode=settings.mode,
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
        """The repo map for the transcript as it stands ('' when the map is off or finds nothing), after the
        folders added beside the repository."""
        dirs = self.settings().dirs
        added = ", ".join(os.path.relpath(d, self.config.root) + "/" for d in dirs)
        head = f"Folders added beside the repository, which the tools reach too: {added}" if dirs else ""
        if self.deps.repo_map is None:
            return head
        try:
            text = self.deps.repo_map(self.messages, dirs)
        except Exception as e:  # a broken map must not cost the turn
            log.warning("repo map failed", exc_info=e)
            text = ""
        return "\n\n".join(x for x in (head, text) if x)

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
                agent.calls,
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

    def _picker(self, emit: Emit, forced: str | None) -> Callable[[RouteState], RouteDecision]:
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

    def rewind_points(self) -> list[EditCheckpointRow]:
        """The states `/rewind` can go back to, oldest first: before each turn's first change, and after
        every call that may have changed the tree."""
        return self.checkpoints.points()

    def rewind(self, seq: int, code: bool = True, conversation: bool = False) -> list[str]:
        """Go back to checkpoint `seq`: the tree exactly as it was (untracked files included), and/or the
        conversation as the workers saw it then (kept as a compaction, so `--continue` resumes from there).
        Returns the paths restored."""
        with self._lock, self.deps.store.session_lock(self.id):
            self._catch_up()
            point = self.checkpoints.point(seq)
            restored = self.checkpoints.restore(point) if code else []
            if conversation:
                messages = self.checkpoints.conversation_at(point)
                record = CompactionRecord(tuple(messages), 0, 0, 0, "rewind", "")
                self.ledger.turn(self.turn).compacted(record)
                self.messages = messages
                self._seen = self.ledger.message_count()
            return restored

    def undo(self) -> list[str]:
        """Restore the tree to its state before the last turn that changed it. Returns the restored paths."""
        return self.checkpoints.undo()


def _observed(emit: Emit, observers: Sequence[Emit]) -> Emit:
    """`emit`, with each observer seeing the event first."""
    if not observers:
        return emit

    def both(event: Event) -> None:
        for observe in observers:
            observe(event)
        emit(event)

    return both
