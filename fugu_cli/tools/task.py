"""The `task` tool (Claude Code's Task): a worker hands a self-contained subtask to a fresh subagent with a
transcript and ledger of its own; the subagent's final answer is the call's result.

This module is the tool's face: its arguments, the request it hands on and the outcome it gets back. Running
the subagent is the session's business (`ToolContext.delegate`, fugu_cli/subagents); never runs an agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fugu_cli.tools import ToolContext
from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.types import WorkerUsage

NAME = "task"
GENERAL = "general-purpose"


@dataclass(frozen=True)
class TaskRequest:
    description: str
    prompt: str
    subagent_type: str  # GENERAL, or a custom agent's name
    call_id: str


@dataclass(frozen=True)
class TaskOutcome:
    agent: str  # the agent that ran it
    status: str  # the subagent's TurnStatus
    answer: str  # its final answer, or why it stopped
    steps: int
    spent: tuple[tuple[str, WorkerUsage], ...] = ()  # by worker


Delegate = Callable[[TaskRequest, ToolContext], TaskOutcome]


def task(inv: Invocation, description: str, prompt: str, subagent_type: str | None = None) -> str:
    """Hand a self-contained subtask to a fresh subagent and get its final answer back. The subagent
    starts with an empty transcript: it sees only your prompt, so say everything it needs (files,
    what to find or change, what to report). It works with the same tools as you (read-only unless
    your permissions allow more) and cannot ask the user anything. Use it for searches and reviews that
    would fill your own context, or for independent parts of a larger task.

    Args:
        description: A short (3-5 words) label for the subtask, shown to the user.
        prompt: The whole subtask for the subagent, with what its answer must contain.
        subagent_type: The agent to use (default general-purpose).
    """
    if inv.ctx.delegate is None:
        raise ToolFailed(
            "subagents are not available here (the depth limit is reached): do the work yourself."
        )
    if not prompt.strip():
        raise ToolFailed("prompt is empty: say what the subagent must do and report.")
    request = TaskRequest(
        description=" ".join(description.split())[:80] or "subtask",
        prompt=prompt,
        subagent_type=(subagent_type or GENERAL).strip() or GENERAL,
        call_id=inv.ctx.call_id,
    )
    outcome = inv.ctx.delegate(request, inv.ctx)
    inv.spent = outcome.spent
    if outcome.status != "success":
        raise ToolFailed(
            f"The subagent ({outcome.agent}) stopped after {outcome.steps} step(s) without finishing "
            f"({outcome.status.replace('_', ' ')}): {outcome.answer}"
        )
    return outcome.answer or "(the subagent gave no answer)"
