"""Hooks as Claude Code has them: the user's shell commands run at PreToolUse, PostToolUse, UserPromptSubmit,
Stop and SessionStart, each given the event as JSON on stdin, run in the sandbox with a timeout, and each
run recorded in the ledger (`hook_runs`).

What a hook's answer does (exit 2 blocks with stderr as the reason; JSON on stdout may allow, deny, ask,
change a call's input, add context or keep the agent going) is decided here; the agent and the session call
in at the right moments. Never prints: what the user should read goes through `say`/`ToolContext.notify`.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fugu_cli.compat import CLAUDE_MODE_NAMES
from fugu_cli.extension_config import HookSpec
from fugu_cli.hooks.runner import (
    HookEnv,
    HookRun,
    claude_input,
    from_claude_input,
    matches,
    run_hook,
    tool_names,
)
from fugu_cli.ledger import HookRunRecord, TurnLedger
from fugu_cli.tools import ApprovalRequest, ToolContext
from fugu_cli.types import ToolCall, ToolResult

__all__ = ["HookEnv", "HookStop", "Hooks", "PromptVerdict", "Site", "ToolHooks"]

Say = Callable[[str], None]


@dataclass(frozen=True)
class Site:
    """Where a hook fires: the turn's ledger, the step (0 outside steps) and the agent at work."""

    ledger: TurnLedger
    step: int = 0
    agent: str = ""


class HookStop(Exception):
    """A hook answered `"continue": false`: the turn ends here; the message is its `stopReason`."""


class ToolHooks(Protocol):
    """What the agent calls around every tool call (hooks, and the instruction files of new folders)."""

    def before_tool(
        self, call: ToolCall, ctx: ToolContext, site: Site
    ) -> tuple[ToolCall, ToolContext] | ToolResult: ...

    def after_tool(self, call: ToolCall, result: ToolResult, ctx: ToolContext, site: Site) -> ToolResult: ...


@dataclass(frozen=True)
class PromptVerdict:
    """What UserPromptSubmit hooks made of a prompt: refused (the reason is the user's to read) or let
    through, perhaps with context for the model."""

    blocked: str | None = None
    context: str = ""


_ANSWER = {"deny": 3, "ask": 2, "allow": 1}


class Hooks:
    """The configured hooks of one session."""

    def __init__(self, specs: Sequence[HookSpec], env: HookEnv, session_id: str) -> None:
        self.specs = tuple(specs)
        self.env = env
        self.session_id = session_id

    def __bool__(self) -> bool:
        return bool(self.specs)

    def for_event(self, event: str, names: tuple[str, ...] = ()) -> list[HookSpec]:
        return [s for s in self.specs if s.event == event and (not names or matches(s.matcher, names))]

    # --- tool events (ToolHooks) ---------------------------------------------------------------------------

    def before_tool(
        self, call: ToolCall, ctx: ToolContext, site: Site
    ) -> tuple[ToolCall, ToolContext] | ToolResult:
        specs = self.for_event("PreToolUse", tool_names(call.name))
        if not specs:
            return call, ctx
        args = _arguments(call)
        answer, reason = "", ""
        env = _where(ctx)
        for spec in specs:
            payload = {
                **self._common("PreToolUse", ctx.policy.mode, env),
                "tool_name": call.name,
                "tool_input": claude_input(call.name, args, env.root),
                "tool_use_id": call.id,
            }
            run = self._run(spec, payload, site, call, ctx.cancel, env)
            self._tell(run, ctx.notify)
            decision, why, updated = _pre_tool_answer(run)
            self._record(run, site, call, _pre_outcome(decision, updated))
            if decision == "deny":
                return _refused(call, f"Blocked by a PreToolUse hook: {why or 'no reason given'}")
            if updated is not None:
                args = from_claude_input(call.name, args, updated, env.root)
                call = dataclasses.replace(call, arguments=json.dumps(args, ensure_ascii=False))
            if _ANSWER.get(decision, 0) > _ANSWER.get(answer, 0):
                answer, reason = decision, why
        if answer == "ask":
            return self._ask(call, ctx, reason)
        if answer == "allow":
            return call, dataclasses.replace(ctx, approve=_yes)  # deny rules and read-only still refuse
        return call, ctx

    def after_tool(self, call: ToolCall, result: ToolResult, ctx: ToolContext, site: Site) -> ToolResult:
        specs = self.for_event("PostToolUse", tool_names(call.name))
        notes: list[str] = []
        env = _where(ctx)
        for spec in specs:
            args = _arguments(call)
            payload = {
                **self._common("PostToolUse", ctx.policy.mode, env),
                "tool_name": call.name,
                "tool_input": claude_input(call.name, args, env.root),
                "tool_response": _response(result, args.get("path"), env),
                "tool_use_id": call.id,
            }
            run = self._run(spec, payload, site, call, ctx.cancel, env)
            self._tell(run, ctx.notify)
            said = _feedback(run)
            self._record(run, site, call, "feedback" if said else _plain(run))
            notes += said
        if not notes:
            return result
        return dataclasses.replace(result, content=result.content + "\n\n" + _block("PostToolUse", notes))

    # --- session events ------------------------------------------------------------------------------------

    def user_prompt(self, prompt: str, site: Site, mode: str, say: Say) -> PromptVerdict:
        context: list[str] = []
        for spec in self.for_event("UserPromptSubmit"):
            payload = {**self._common("UserPromptSubmit", mode), "prompt": prompt}
            run = self._run(spec, payload, site)
            self._tell(run, say)
            if run.blocks:
                self._record(run, site, outcome="blocked")
                return PromptVerdict(blocked=run.stderr.strip() or "a UserPromptSubmit hook refused it")
            if run.field("decision") == "block":
                self._record(run, site, outcome="blocked")
                return PromptVerdict(blocked=str(run.field("reason") or "a UserPromptSubmit hook refused it"))
            added = _context(run)
            self._record(run, site, outcome="context" if added else _plain(run))
            context += added
        return PromptVerdict(context="\n".join(context))

    def session_start(self, source: str, site: Site, mode: str, say: Say) -> str:
        context: list[str] = []
        for spec in self.for_event("SessionStart", (source,)):
            payload = {**self._common("SessionStart", mode), "source": source}
            run = self._run(spec, payload, site)
            self._tell(run, say)
            if run.blocks and run.stderr.strip():
                say(f"SessionStart hook: {run.stderr.strip()[:500]}")
            added = [] if run.failed else _context(run, continue_ok=True)
            self._record(run, site, outcome="context" if added else _plain(run))
            context += added
        return "\n".join(context)

    def stop(self, last_text: str, active: bool, site: Site, mode: str, say: Say) -> str | None:
        """The reason to keep working when a Stop hook blocks the agent's stop; None lets it stop."""
        for spec in self.for_event("Stop"):
            payload = {
                **self._common("Stop", mode),
                "stop_hook_active": active,
                "last_assistant_message": last_text,
            }
            run = self._run(spec, payload, site)
            self._tell(run, say)
            if run.field("continue") is False:
                self._record(run, site, outcome="stopped")
                return None
            reason = None
            if run.blocks:
                reason = run.stderr.strip() or "a Stop hook asked you to keep working"
            elif run.field("decision") == "block":
                reason = str(run.field("reason") or "a Stop hook asked you to keep working")
            self._record(run, site, outcome="blocked" if reason else _plain(run))
            if reason:
                return reason
        return None

    # --- pieces --------------------------------------------------------------------------------------------

    def _common(self, event: str, mode: str, env: HookEnv | None = None) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "transcript_path": "",
            "cwd": str((env or self.env).root),
            "hook_event_name": event,
            "permission_mode": CLAUDE_MODE_NAMES.get(mode, mode),
        }

    def _run(
        self,
        spec: HookSpec,
        payload: Mapping[str, Any],
        site: Site,
        call: ToolCall | None = None,
        cancel: threading.Event | None = None,
        env: HookEnv | None = None,
    ) -> HookRun:
        run = run_hook(spec, payload, env or self.env, cancel)
        if run.field("continue") is False and spec.event != "Stop":
            self._record(run, site, call, "stopped")
            raise HookStop(str(run.field("stopReason") or f"a {spec.event} hook stopped the turn"))
        return run

    def _tell(self, run: HookRun, say: Say | None) -> None:
        if say is None:
            return
        if run.failed:
            say(run.why_failed())
        message = run.field("systemMessage")
        if isinstance(message, str) and message.strip():
            say(message.strip())

    def _record(self, run: HookRun, site: Site, call: ToolCall | None = None, outcome: str = "ok") -> None:
        site.ledger.hook_run(
            HookRunRecord(
                event=run.spec.event,
                matcher=run.spec.matcher,
                command=run.spec.command,
                exit_code=run.exit_code,
                timed_out=run.timed_out,
                outcome="timeout" if run.timed_out else ("error" if run.failed else outcome),
                stdout=run.stdout,
                stderr=run.stderr or run.error,
                duration_ms=run.duration_ms,
                agent=site.agent,
                tool=call.name if call else "",
                call_id=call.id if call else "",
                step=site.step,
            )
        )

    def _ask(
        self, call: ToolCall, ctx: ToolContext, reason: str
    ) -> tuple[ToolCall, ToolContext] | ToolResult:
        """A hook answered "ask": the user decides, whatever the mode; with no terminal it is refused."""
        why = f" ({reason})" if reason else ""
        if ctx.approve is None:
            return _refused(
                call,
                f"Blocked: a PreToolUse hook asked for the user's approval{why}, and there is no terminal",
            )
        args = _arguments(call)
        what = str(args["command"]) if call.name == "shell" and "command" in args else call.name
        request = ApprovalRequest(
            agent=ctx.agent,
            tool=call.name,
            kind="exec",
            summary=f"{what} (a PreToolUse hook asks you to confirm{': ' + reason if reason else ''})",
            detail=call.arguments,
            prefix=f"hook:{call.name}",
        )
        if ctx.approve(request) == "no":
            return _refused(call, f"Permission denied: the user declined {call.name} (a hook asked{why})")
        return call, dataclasses.replace(ctx, approve=_yes)


def _where(ctx: ToolContext) -> HookEnv:
    """Tool hooks run where the call runs: an ultra step's worktree, with the call's sandbox."""
    return HookEnv(ctx.root, ctx.sandbox)


def _yes(_: ApprovalRequest) -> Any:
    return "yes"


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _refused(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, content=message, is_error=True, denied=True)


def _pre_tool_answer(run: HookRun) -> tuple[str, str, Mapping[str, Any] | None]:
    """(allow|deny|ask|"", the reason, updatedInput or None) from a PreToolUse hook's run."""
    if run.blocks:
        return "deny", run.stderr.strip(), None
    if run.failed or run.reply is None:
        return "", "", None
    specific = run.specific()
    decision = specific.get("permissionDecision")
    reason = specific.get("permissionDecisionReason")
    legacy = {"approve": "allow", "block": "deny"}.get(str(run.field("decision")))
    if decision not in ("allow", "deny", "ask"):
        decision, reason = legacy or "", run.field("reason") if legacy else reason
    updated = specific.get("updatedInput")
    return str(decision or ""), str(reason or ""), updated if isinstance(updated, dict) else None


def _pre_outcome(decision: str, updated: Mapping[str, Any] | None) -> str:
    names = {"deny": "blocked", "allow": "allowed", "ask": "asked"}
    if decision in names:
        return names[decision] + ("+modified" if updated is not None and decision != "deny" else "")
    return "modified" if updated is not None else "ok"


def _feedback(run: HookRun) -> list[str]:
    """What a PostToolUse hook tells the model: stderr on exit 2, a block's reason, added context."""
    if run.blocks:
        return [run.stderr.strip() or "a PostToolUse hook objected (exit code 2)"]
    out = []
    if run.field("decision") == "block" and run.field("reason"):
        out.append(str(run.field("reason")))
    extra = run.specific().get("additionalContext")
    if isinstance(extra, str) and extra.strip():
        out.append(extra.strip())
    return out


def _context(run: HookRun, continue_ok: bool = True) -> list[str]:
    """UserPromptSubmit/SessionStart context: `additionalContext`, or plain stdout on exit 0."""
    if run.failed or run.blocks:
        return []
    extra = run.specific().get("additionalContext")
    if isinstance(extra, str) and extra.strip():
        return [extra.strip()]
    if run.reply is None and run.stdout.strip():
        return [run.stdout.strip()]
    return []


def _plain(run: HookRun) -> str:
    return "ok"


def _response(result: ToolResult, path: Any, env: HookEnv) -> dict[str, Any]:
    out: dict[str, Any] = {
        "content": result.content,
        "is_error": result.is_error,
        "exit_code": result.exit_code,
        "files_touched": list(result.files_touched),
        "success": not result.is_error,
    }
    if isinstance(path, str):
        out["filePath"] = str((env.root / path).resolve())
    return out


def _block(event: str, notes: Sequence[str]) -> str:
    body = "\n".join(notes)
    return f"<{event}-hook>\n{body}\n</{event}-hook>"
