"""The todo tool (`todo_write`, Claude Code's TodoWrite): the worker's whole task list, replaced at each call.

The list lives in the call's arguments, so the ledger keeps it with the session (the latest call is the list)
and the front ends show it from the call as it streams. Checks the list and says what it holds; never prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fugu_cli.tools.base import Invocation, ToolFailed

TodoStatus = Literal["pending", "in_progress", "completed"]
STATUSES: tuple[TodoStatus, ...] = ("pending", "in_progress", "completed")
MAX_TODOS = 50
NAME = "todo_write"

DESCRIPTION = (
    "Write your task list for this session: the whole list each time (it replaces the previous one). "
    "Use it for work of three steps or more: add the steps, mark one in_progress before you start it and "
    "completed as soon as it is done. The user sees the list update live."
)
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "description": "The full list, in order.",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The step, imperative: 'Run the tests'."},
                    "status": {"type": "string", "enum": list(STATUSES)},
                    "activeForm": {
                        "type": "string",
                        "description": "The step while it runs: 'Running the tests'.",
                    },
                },
                "required": ["content", "status"],
            },
        }
    },
    "required": ["todos"],
}


@dataclass(frozen=True)
class Todo:
    content: str
    status: TodoStatus = "pending"
    active_form: str = ""


def parse(raw: Any) -> list[Todo]:
    """The list from a call's `todos` argument; a ToolFailed says what is wrong with it."""
    if not isinstance(raw, list):
        raise ToolFailed("todos must be a list of {content, status} objects.")
    if len(raw) > MAX_TODOS:
        raise ToolFailed(f"todos holds {len(raw)} items; keep it to {MAX_TODOS} or fewer.")
    out: list[Todo] = []
    for n, item in enumerate(raw, 1):
        if not isinstance(item, Mapping):
            raise ToolFailed(f"todo {n} must be an object with content and status.")
        content, status = item.get("content"), item.get("status", "pending")
        if not isinstance(content, str) or not content.strip():
            raise ToolFailed(f"todo {n} needs a non-empty content string.")
        if status not in STATUSES:
            raise ToolFailed(f"todo {n}: status must be one of {', '.join(STATUSES)} (got {status!r}).")
        active = item.get("activeForm") or item.get("active_form") or ""
        out.append(Todo(" ".join(content.split()), status, str(active).strip()))
    return out


def from_arguments(arguments: str) -> list[Todo] | None:
    """The list a recorded `todo_write` call wrote (None when its arguments are not a valid list)."""
    try:
        return parse(json.loads(arguments or "{}").get("todos"))
    except (ValueError, AttributeError, ToolFailed):
        return None


def render(todos: Sequence[Todo]) -> str:
    """The list as the worker reads it back: `[x]` done, `[~]` in progress, `[ ]` pending."""
    marks = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
    return "\n".join(f"{marks[t.status]} {t.content}" for t in todos)


def todo_write(inv: Invocation, **arguments: Any) -> str:
    todos = parse(arguments.get("todos"))
    running = [t for t in todos if t.status == "in_progress"]
    done = sum(1 for t in todos if t.status == "completed")
    head = f"Todo list updated: {len(todos)} items, {done} completed, {len(running)} in progress."
    if len(running) > 1:
        head += " Keep one item in_progress at a time."
    return f"{head}\n{render(todos)}" if todos else head + " The list is empty."
