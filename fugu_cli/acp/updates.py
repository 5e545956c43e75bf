"""fugu's Events as ACP `session/update`s: the workers' text as message chunks, each route decision and step
cost as a visible thought, tool calls with their kind, status, locations and diffs, an ultra workflow as a
plan. One `Translator` per session; it keeps what a later event needs (a file's text before an edit, the
plan's rows). Never sends anything: it returns the updates.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acp import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import PermissionOption, PlanEntry, ToolCallLocation, ToolCallUpdate

from fugu_cli.events import (
    AssistantMessage,
    Compacted,
    Event,
    Notice,
    ProviderFailed,
    RouteChosen,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    WorkflowAgentEvent,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
)
from fugu_cli.tools import Answer, ApprovalRequest
from fugu_cli.types import Message, ToolCall
from fugu_cli.ui.phrases import route_reasons, tool_summary

Update = Any  # one of acp.schema's session update models
RESULT_CHARS = 4000  # of a tool's result shown in the editor (the model got all of it)
KINDS = {
    "read_file": "read",
    "glob": "search",
    "grep": "search",
    "edit_file": "edit",
    "write_file": "edit",
    "shell": "execute",
    "git_status": "read",
    "git_diff": "read",
    "git_log": "read",
    "git_commit": "execute",
    "web_fetch": "fetch",
    "web_search": "fetch",
}
OPTIONS: dict[str, Answer] = {"allow": "yes", "always": "always", "reject": "no"}


def permission_options(prefix: str) -> list[PermissionOption]:
    """Allow once, always (what fugu's `always` remembers: this command prefix, or every edit), reject."""
    return [
        PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
        PermissionOption(option_id="always", name=f"Always allow ({prefix})", kind="allow_always"),
        PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    ]


class Translator:
    """Events of one session's turns to ACP updates. Called from the turn's thread only (one turn at a time
    per session; ultra mode's steps are serialised by the caller's lock)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._before: dict[str, str | None] = {}  # tool call id -> the file's text before an edit
        self._streamed = False  # the current step's text already went out as deltas
        self._plan: list[PlanEntry] = []

    def updates(self, event: Event) -> list[Update]:
        while isinstance(event, WorkflowAgentEvent):
            event = event.inner
        if isinstance(event, TextDelta):
            self._streamed = True
            return [update_agent_message_text(event.text)] if event.text else []
        if isinstance(event, AssistantMessage):
            streamed, self._streamed = self._streamed, False
            text = event.message.content or ""
            return [update_agent_message_text(text)] if text.strip() and not streamed else []
        if isinstance(event, RouteChosen):
            d = event.decision
            why = ", ".join(route_reasons(d)) + (f"; {d.reason}" if d.reason else "")
            return [update_agent_thought_text(f"↳ step {event.step}: {d.worker} ({why})\n")]
        if isinstance(event, ToolStarted):
            return [self._started(event.call)]
        if isinstance(event, ToolFinished):
            return [self._finished(event)]
        if isinstance(event, ProviderFailed):
            return [update_agent_thought_text(f"✗ {event.worker} failed: {event.error}\n")]
        if isinstance(event, Notice):
            return [update_agent_thought_text(f"{event.level}: {event.text}\n")]
        if isinstance(event, Compacted):
            text = f"compacted the transcript: {event.tokens_before:,} → {event.tokens_after:,} tokens\n"
            return [update_agent_thought_text(text)]
        if isinstance(event, TurnFinished):
            return [update_agent_thought_text(turn_summary(event) + "\n")]
        return self._workflow(event)

    def _workflow(self, event: Event) -> list[Update]:
        if isinstance(event, WorkflowPlanned) and event.parent_step is None:
            self._plan = [plan_entry(f"{s['worker']}: {s['subtask']}") for s in event.steps]
        elif isinstance(event, WorkflowStepStarted | WorkflowStepFinished) and event.parent_step is None:
            if not 0 <= event.step < len(self._plan):
                return []
            done = "completed" if isinstance(event, WorkflowStepFinished) else "in_progress"
            self._plan[event.step] = self._plan[event.step].model_copy(update={"status": done})
        else:
            return []
        return [update_plan(self._plan)]

    def _started(self, call: ToolCall) -> Update:
        args = _arguments(call)
        path = self._path(args)
        content = []
        if call.name in ("edit_file", "write_file") and path is not None:
            before = _read(path)
            self._before[call.id] = before
            after = proposed_text(call.name, args, before)
            if after is not None:
                content = [tool_diff_content(str(path), after, before)]
        return start_tool_call(
            call.id,
            tool_summary(call.name, call.arguments),
            kind=KINDS.get(call.name, "other"),  # type: ignore[arg-type]
            status="pending",
            content=content or None,
            locations=[ToolCallLocation(path=str(path))] if path is not None else None,
            raw_input=args,
        )

    def _finished(self, event: ToolFinished) -> Update:
        r = event.result
        content: list[Any] = []
        path = self._path(_arguments(event.call))
        if event.call.id in self._before and path is not None:
            before, after = self._before.pop(event.call.id), _read(path)
            if after is not None and after != before:
                content.append(tool_diff_content(str(path), after, before))
        shown = r.content if len(r.content) <= RESULT_CHARS else r.content[:RESULT_CHARS] + "\n…"
        content.append(tool_content(text_block(shown)))
        return update_tool_call(
            event.call.id,
            status="failed" if r.is_error or r.denied else "completed",
            content=content,
            raw_output={"content": shown, "is_error": r.is_error, "exit_code": r.exit_code},
        )

    def permission_call(self, call: ToolCall | None, request: ApprovalRequest) -> ToolCallUpdate:
        """What the client is shown when asked: the call, its diff or command, where it acts."""
        if call is None:
            return ToolCallUpdate(
                tool_call_id=f"fugu-{request.tool}",
                title=request.summary,
                status="pending",
                content=[tool_content(text_block(request.detail))],
            )
        args = _arguments(call)
        path = self._path(args)
        content: list[Any] = []
        if call.name in ("edit_file", "write_file") and path is not None:
            before = self._before.get(call.id)
            after = proposed_text(call.name, args, before)
            if after is not None:
                content.append(tool_diff_content(str(path), after, before))
        if not content:
            content.append(tool_content(text_block(request.detail or request.summary)))
        return ToolCallUpdate(
            tool_call_id=call.id,
            title=request.summary,
            kind=KINDS.get(call.name, "other"),  # type: ignore[arg-type]
            status="pending",
            content=content,
            locations=[ToolCallLocation(path=str(path))] if path is not None else None,
            raw_input=args,
        )

    def _path(self, args: dict[str, Any]) -> Path | None:
        value = args.get("path")
        if not isinstance(value, str) or not value:
            return None
        path = (self.root / value).resolve()
        return path if path.is_relative_to(self.root.resolve()) else None


def replay(messages: Sequence[Message]) -> list[Update]:
    """A loaded session's conversation as updates: the users' messages and the workers' text."""
    out: list[Update] = []
    for m in messages:
        if m.role == "user" and m.content:
            out.append(update_user_message_text(m.content))
        elif m.role == "assistant" and (m.content or "").strip():
            out.append(update_agent_message_text(m.content or ""))
    return out


def turn_summary(event: TurnFinished) -> str:
    """`2 steps · alpha ×1, beta ×1 · $0.0040`: who did the turn and what it cost."""
    r = event.result
    used = ", ".join(f"{name} ×{w.steps}" for name, w in r.workers.items()) or "no worker"
    steps = f"{r.num_turns} step" + ("" if r.num_turns == 1 else "s")
    return f"{steps} · {used} · ${r.usage.cost_usd:.4f}"


def proposed_text(tool: str, args: dict[str, Any], before: str | None) -> str | None:
    """The file's text after the edit the call asks for (None when it cannot be applied as given)."""
    if tool == "write_file":
        content = args.get("content")
        return content if isinstance(content, str) else None
    old, new = args.get("old_text"), args.get("new_text")
    if before is None or not isinstance(old, str) or not isinstance(new, str) or old not in before:
        return None
    return before.replace(old, new, 1)


def _arguments(call: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
