"""The slash commands of the agent's own moves: `/plan` (plan mode), `/todos` (the workers' list), `/agents`
(what `task` may hand work to), `/ps` and `/stop` (background commands), `/rewind` (back to any edit).
Each takes the console and the session; ui/commands.py lists them. Prints only through that console.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from fugu_cli.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from fugu_cli.session import Session


def _say(console: Console, text: str, style: str = "") -> None:
    from rich.text import Text

    console.print(Text(text, style=style), overflow="fold")


def plan(console: Console, session: Session, arg: str) -> None:
    """`/plan [on|off]`: the next turns explore read-only and end with a plan to approve."""
    word = arg.strip().lower() or "on"
    if word not in ("on", "off"):
        raise UsageError("usage: /plan [on|off]")
    session.set_planning(word == "on")
    if word == "on":
        _say(console, "plan mode: the workers explore read-only, then ask you to run their plan", "green")
    else:
        _say(console, f"plan mode off: tools run in {session.settings().mode} mode", "green")


def todos(console: Console, session: Session, arg: str) -> None:
    from fugu_cli.ui.render import todo_text

    arguments = session.todo_arguments()
    if arguments is None:
        _say(console, "no todo list yet: the workers write one for work of several steps", "dim")
        return
    console.print(todo_text(arguments), overflow="fold")


def agents(console: Console, session: Session, arg: str) -> None:
    for spec in session.config.agents.values():
        model = spec.model if not spec.routed else "router"
        where = f"{spec.scope}" + (f", {spec.path}" if spec.path else "")
        _say(console, f"{spec.name}  ({model}; {where})", "bold")
        _say(console, f"    {spec.description}", "dim")
        if spec.unknown_tools:
            _say(console, f"    tools fugu does not have: {', '.join(spec.unknown_tools)}", "yellow")


def ps(console: Console, session: Session, arg: str) -> None:
    shells = session.background_shells()
    if not shells:
        _say(console, "no background command in this session", "dim")
        return
    now = time.time()
    for s in shells:
        age = f"{now - s.started:.0f} s"
        _say(console, f"{s.id}  {s.state}  {age}  {s.output_bytes} bytes  $ {s.command}")


def stop(console: Console, session: Session, arg: str) -> None:
    if not arg.strip():
        raise UsageError("usage: /stop ID (/ps lists them)")
    info = session.stop_shell(arg.strip())
    _say(console, f"{info.id}: {info.state}", "green")


REWIND_WHAT = {"both": (True, True), "code": (True, False), "conversation": (False, True)}


def rewind(console: Console, session: Session, arg: str) -> None:
    """`/rewind`: the checkpoints; `/rewind N [both|code|conversation]`: back to checkpoint N."""
    words = arg.split()
    if not words:
        _rewind_list(console, session)
        return
    if not words[0].isdigit() or len(words) > 2 or (len(words) == 2 and words[1] not in REWIND_WHAT):
        raise UsageError("usage: /rewind [N [both|code|conversation]] (/rewind lists the checkpoints)")
    code, conversation = REWIND_WHAT[words[1] if len(words) == 2 else "both"]
    paths = session.rewind(int(words[0]), code=code, conversation=conversation)
    said = []
    if code:
        said.append(f"restored {len(paths)} path(s)" + (f": {', '.join(paths)}" if paths else ""))
    if conversation:
        said.append(f"the conversation is back to checkpoint {words[0]} ({len(session.messages)} messages)")
    _say(console, "; ".join(said), "green")


def _rewind_list(console: Console, session: Session) -> None:
    from fugu_cli.ui.phrases import tool_summary

    points = session.rewind_points()
    if not points:
        _say(console, "no checkpoint yet: they are taken as the workers change files", "dim")
        return
    calls = {c.call_id: c for c in session.ledger.tool_calls()}
    for p in points:
        when = time.strftime("%H:%M:%S", time.localtime(p.created_at))
        if p.kind == "turn":
            what = "before the turn's first change"
        else:
            c = calls.get(p.call_id)
            what = "after " + (tool_summary(c.tool, c.arguments) if c else p.tool)
        _say(console, f"{p.seq:>3}  turn {p.turn}  {when}  {what}")
    _say(console, "/rewind N [both|code|conversation] goes back to N (both by default)", "dim")
