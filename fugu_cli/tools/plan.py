"""The plan tool (`exit_plan_mode`, Claude Code's ExitPlanMode): in plan mode the worker hands its plan to the
user, who runs it (asking before each edit, or accepting edits) or keeps planning.

The question goes through the approval seam (the REPL's prompt, the stream-json client's `can_use_tool`, the
editor's permission request): "yes" runs it in ask mode, "always" with edits accepted, "no" keeps planning.
Never changes a file; the run's mode changes through `ToolContext.leave_plan`.
"""

from __future__ import annotations

from fugu_cli.tools import ApprovalRequest
from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.types import PermissionMode

NAME = "exit_plan_mode"
MODES: dict[str, PermissionMode] = {"yes": "ask", "always": "auto-edit"}


def exit_plan_mode(inv: Invocation, plan: str) -> str:
    """Present your plan to the user and ask to carry it out. Call it in plan mode once you have explored
    enough and the plan is complete; write the steps with todo_write first. If the user approves, you leave
    plan mode and carry out the plan right away; if not, keep planning (change nothing).

    Args:
        plan: The plan in Markdown: what you will change, where, in what order, and how you will check it.
    """
    ctx = inv.ctx
    if ctx.leave_plan is None:
        raise ToolFailed("You are not in plan mode: go ahead with the work.")
    if not plan.strip():
        raise ToolFailed("plan is empty: write the plan you want the user to approve.")
    if ctx.approve is None:
        raise ToolFailed(
            "Nobody can approve the plan here (no terminal, and no client that answers permission "
            "requests). End your turn with the plan as your answer; change no file."
        )
    request = ApprovalRequest(
        agent=ctx.agent, tool=NAME, kind="exec", summary="carry out this plan", detail=plan, prefix="plan"
    )
    answer = ctx.approve(request)
    if answer not in MODES:
        return (
            "The user chose to keep planning: change no file. Ask what the plan is missing, or refine it "
            "and call exit_plan_mode again."
        )
    mode = MODES[answer]
    ctx.leave_plan(mode)
    edits = "edits are accepted" if mode == "auto-edit" else "the user approves each edit and command"
    return (
        f"The user approved the plan; you have left plan mode ({edits}). Carry it out now, step by step, "
        "keeping the todo list up to date, and check the result."
    )
