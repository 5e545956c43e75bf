"""Slash commands: the table of `/name`s the REPL completes, and what each one does to the live session.

Cheap to import (the prompt completes from `COMMANDS` before anything heavy is loaded); rich and the session
are reached only when a command runs. A name fugu does not have may be a custom command or an MCP prompt
(ui/custom.py), run as a turn; an unknown command suggests the nearest one.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fugu_cli.errors import FuguError

if TYPE_CHECKING:
    from rich.console import Console

    from fugu_cli.ledger import Ledger
    from fugu_cli.session import Session
    from fugu_cli.tools import ToolKind
    from fugu_cli.tools.base import Invocation


class Context(Protocol):
    """What a command may use: the terminal, the live session, and the REPL's own controls."""

    @property
    def console(self) -> Console: ...

    @property
    def session(self) -> Session: ...

    def switch_session(self, resume: str | None) -> None: ...

    def stop(self) -> None: ...

    def run_prompt(self, text: str, worker: str | None = None, allow: Sequence[str] = ()) -> None:
        """Run `text` as a turn (with `worker` forced and `allow` granted for it)."""


Handler = Callable[[Context, str], None]


@dataclass(frozen=True)
class Command:
    name: str
    args: str
    help: str
    run: Handler


def parse(line: str) -> tuple[str, str] | None:
    """`/worker beta` → ("worker", "beta"); None when the line is a task (`/usr/bin is full`)."""
    if not line.startswith("/"):
        return None
    parts = line[1:].split(None, 1)
    if not parts or "/" in parts[0]:
        return None
    return parts[0].lower(), parts[1].strip() if len(parts) > 1 else ""


def nearest(name: str, others: Sequence[str] = ()) -> str | None:
    """The command a typo most likely meant (`/wroker` → worker, `/tr` → trace); None for a word that
    resembles none of them (`/nosuch`). `others`: custom commands' names."""
    known = [*COMMANDS, *others]
    match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if match:
        return match[0]
    prefixed = [c for c in known if len(name) >= 2 and c.startswith(name)]
    return prefixed[0] if len(prefixed) == 1 else None


def dispatch(ctx: Context, line: str) -> bool:
    """Run a slash command; False when the line is not one (the REPL sends it to the model)."""
    parsed = parse(line)
    if parsed is None:
        return False
    name, arg = parsed
    command = COMMANDS.get(name)
    try:
        if command is not None:
            command.run(ctx, arg)
        elif _extension(ctx, name, arg):  # a custom command of the user's, even one named as an alias
            pass
        elif name in ALIASES:
            COMMANDS[ALIASES[name]].run(ctx, arg)
        else:
            from fugu_cli.ui import custom

            guess = nearest(name, [n for n, _ in custom.names(ctx.session.root, ctx.session)])
            hint = f"; did you mean /{guess}?" if guess else ""
            _say(ctx, f"unknown command /{name}{hint} (/help lists them)", "yellow")
    except FuguError as e:
        _say(ctx, str(e), "red")
    return True


def _extension(ctx: Context, name: str, arg: str) -> bool:
    """Run a custom command or an MCP prompt as a turn; False when `name` is neither."""
    from fugu_cli.ui import custom

    prompted = custom.resolve(ctx.session, name, arg)
    if prompted is None:
        return False
    for note in prompted.notes:
        _say(ctx, note, "yellow")
    ctx.run_prompt(prompted.prompt, prompted.worker, prompted.allow)
    return True


def _say(ctx: Context, text: str, style: str = "") -> None:
    from rich.text import Text

    ctx.console.print(Text(text, style=style), overflow="fold")


# --- the commands -----------------------------------------------------------------------------------------


def _help(ctx: Context, arg: str) -> None:
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for c in COMMANDS.values():
        table.add_row(f"/{c.name}" + (f" {c.args}" if c.args else ""), c.help)
    from fugu_cli.ui import custom

    for name, help_text in custom.names(ctx.session.root, ctx.session):
        table.add_row(f"/{name}", help_text)
    ctx.console.print(table)
    _say(ctx, "also: " + ", ".join(f"/{a} (/{c})" for a, c in ALIASES.items()), "dim")
    _say(
        ctx,
        "Enter sends · Alt-Enter, Ctrl-J or a trailing \\ add a line · @path attaches a file · "
        "Ctrl-R searches history · Ctrl-C stops a step · Ctrl-D exits",
        "dim",
    )


def _worker(ctx: Context, arg: str) -> None:
    session = ctx.session
    if not arg:
        current = session.settings().worker or "auto (the router picks)"
        _say(ctx, f"worker: {current}; pool: {', '.join(session.workers)}")
        return
    if arg == "auto":
        session.set_worker(None)
        _say(ctx, "the router picks the worker for each step again", "dim")
        return
    if arg not in session.workers:
        guess = difflib.get_close_matches(arg, list(session.workers), n=1, cutoff=0.3)
        hint = f"; did you mean {guess[0]}?" if guess else ""
        _say(
            ctx,
            f"no worker named {arg!r} in the pool{hint} (choose: {', '.join(session.workers)}, auto)",
            "red",
        )
        return
    session.set_worker(arg)
    _say(ctx, f"every step goes to {arg} until /worker auto", "dim")


def _pool(ctx: Context, arg: str) -> None:
    from rich.table import Table

    session = ctx.session
    steps = session.ledger.steps()
    last = steps[-1].scores if steps else {}
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("worker", "model", "price in/out per M", "router p", ""):
        table.add_column(col, overflow="fold")
    forced = session.settings().worker
    health = session.worker_health()
    for w in session.pool:
        price = (
            f"${w.price_in:g}/${w.price_out:g}"
            if w.price_in is not None and w.price_out is not None
            else "table"
        )
        p = f"{last[w.name]:.2f}" if w.name in last else "-"
        mark = "; ".join(x for x in ("forced" if forced == w.name else "", health.get(w.name, "")) if x)
        table.add_row(w.name, w.model, price, p, mark)
    ctx.console.print(table)
    _say(ctx, f"router: {session.router_name}", "dim")


def _cost(ctx: Context, arg: str) -> None:
    from rich.table import Table

    from fugu_cli.types import Usage
    from fugu_cli.ui.render import worker_costs

    steps = [s for ledger in _ledgers(ctx.session) for s in ledger.steps()]
    per = worker_costs((s.worker, s.usage) for s in steps)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("worker", "steps", "tokens in", "tokens out", "cost"):
        table.add_column(col, justify="left" if col == "worker" else "right")
    total = Usage()
    for name, (n, u) in per.items():
        total = total + u
        table.add_row(name, str(n), f"{u.prompt_tokens:,}", f"{u.completion_tokens:,}", f"${u.cost_usd:.4f}")
    n_all = sum(n for n, _ in per.values())
    table.add_row(
        "total",
        str(n_all),
        f"{total.prompt_tokens:,}",
        f"{total.completion_tokens:,}",
        f"${total.cost_usd:.4f}",
    )
    _context_used(ctx)
    ctx.console.print(table)


def _context_used(ctx: Context) -> None:
    """How much of each worker's window the next request would fill (what is left after the reply reserve)."""
    rows = ctx.session.context_used()
    if not rows:
        return
    parts = [f"{name} {used:,}/{w.usable:,} ({used / max(w.usable, 1):.0%})" for name, used, w in rows]
    _say(ctx, "context used: " + " · ".join(parts), "dim")


def _compact(ctx: Context, arg: str) -> None:
    done = ctx.session.compact(arg)
    if done is None:
        _say(ctx, "nothing to compact: the transcript holds no step older than the last one", "dim")
        return
    by = f", summary by {done.summarizer}" if done.summarizer else ""
    _say(
        ctx,
        f"compacted: {done.tokens_before:,} → {done.tokens_after:,} tokens for {done.worker} "
        f"({done.messages_replaced} messages replaced{by}); the store keeps them all",
        "green",
    )


def _map(ctx: Context, arg: str) -> None:
    text = ctx.session.repo_map_text()
    if not text:
        _say(ctx, "no repo map: it is off (--no-repo-map) or no source file has a definition", "dim")
        return
    ctx.console.print(text, overflow="fold", markup=False, highlight=False)


def _ledgers(session: Session) -> list[Ledger]:
    """The session's ledgers: "main" (fugu mode) and, in ultra mode, one per workflow step."""
    return session.ledger.all_scopes()


def _trace(ctx: Context, arg: str) -> None:
    from rich.text import Text

    from fugu_cli.ui.phrases import record_text, tool_summary

    ledgers = [(ledger, ledger.steps(), ledger.tool_calls()) for ledger in _ledgers(ctx.session)]
    if not any(steps for _, steps, _ in ledgers):
        _say(ctx, "nothing yet: no step has run in this session", "dim")
        return
    for ledger, steps, calls in ledgers:
        scope = ledger.scope
        hooks = ledger.hook_runs()
        if scope != "main" and steps:
            _say(ctx, f"[{scope}]", "bold")
        for s in steps:
            p = s.scores.get(s.worker)
            why = s.source + (f", p={p:.2f}" if p is not None else "") + (f", {s.reason}" if s.reason else "")
            line = Text(f"turn {s.turn} step {s.step} ", style="dim")
            line.append(s.worker, style="bold cyan")
            line.append(f" ({why}) · {s.status} · ${s.usage.cost_usd:.4f}", style="dim")
            ctx.console.print(line, overflow="fold")
            for c in calls:
                if (c.turn, c.step, c.agent) == (s.turn, s.step, s.worker):
                    flag = " denied" if c.denied else (" error" if c.is_error else "")
                    text = f"    {c.agent}: {tool_summary(c.tool, c.arguments)}{flag}"
                    ctx.console.print(text, overflow="fold", markup=False)
                    for h in hooks:
                        if (h.turn, h.step, h.call_id) == (c.turn, c.step, c.call_id):
                            ran = f"exit {h.exit_code}" if h.exit_code is not None else "no exit"
                            cmd = h.command if len(h.command) <= 60 else f"{h.command[:28]}…{h.command[-28:]}"
                            said = f"      hook {h.event} `{cmd}` {ran}: {h.outcome}"
                            ctx.console.print(said, overflow="fold", markup=False, style="dim")
    numbers: dict[int, int] = {}
    for turn, attempt in ctx.session.ledger.attempts():
        numbers[turn] = numbers.get(turn, 0) + 1
        style = "green" if attempt.passed else "yellow"
        text = f"turn {turn} attempt {numbers[turn]}: {record_text(attempt)}"
        ctx.console.print(text, overflow="fold", markup=False, style=style)


def _diff(ctx: Context, arg: str) -> None:
    from fugu_cli.tools.git import git_diff
    from fugu_cli.ui.render import diff_text

    text = git_diff(_user_invocation(ctx, "git_diff", "read"), arg or None)
    if text.startswith("No uncommitted"):
        _say(ctx, text, "dim")
        return
    ctx.console.print(diff_text(text, limit=None), overflow="fold", end="")


def _undo(ctx: Context, arg: str) -> None:
    paths = ctx.session.undo()
    _say(ctx, f"restored {len(paths)} path(s) to before the turn's first edit: {', '.join(paths)}", "green")


def _commit(ctx: Context, arg: str) -> None:
    from fugu_cli.tools.git import git_commit

    session = ctx.session
    message = arg or _default_message(session)
    _say(ctx, git_commit(_user_invocation(ctx, "git_commit", "edit"), message), "green")


def _default_message(session: Session) -> str:
    tasks = [m.content for m in session.messages if m.role == "user" and m.content]
    subject = tasks[-1].strip().splitlines()[0][:72] if tasks else "changes made with fugu"
    return f"{subject}\n\nMade with fugu (session {session.id})."


def _user_invocation(ctx: Context, tool: str, kind: ToolKind) -> Invocation:
    from fugu_cli.tools import PermissionPolicy, ToolContext
    from fugu_cli.tools.base import Invocation

    # the user typed the command: no approval question, and no checkpoint (it is not a model's edit)
    context = ToolContext(root=ctx.session.root, agent="user", policy=PermissionPolicy(mode="full-auto"))
    return Invocation(ctx=context, tool=tool, kind=kind)


def _clear(ctx: Context, arg: str) -> None:
    ctx.switch_session(None)


def _sessions(ctx: Context, arg: str) -> None:
    rows = ctx.session.recent_sessions(15)
    current = ctx.session.id
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at))
        mark = "*" if r.id == current else " "
        ctx.console.print(
            f"{mark} {r.id}  {when}  ${r.cost_usd:<8.4f} {r.title[:50]}", overflow="ellipsis", markup=False
        )
    _say(ctx, "/resume ID continues one", "dim")


def _export(ctx: Context, arg: str) -> None:
    """`/export [md|json|html] [FILE]`: the session so far as a readable transcript (default Markdown, in
    fugu-SESSION.md here)."""
    from pathlib import Path

    from fugu_cli.app import open_store
    from fugu_cli.errors import UsageError
    from fugu_cli.ui import export

    words = arg.split(None, 1)
    fmt = words.pop(0) if words and words[0] in export.FORMATS else "md"
    if words and words[0].split()[0] in export.FORMATS:
        raise UsageError(f"/export {arg}: give the format first, then the file")
    sid = ctx.session.id
    path = Path(words[0]).expanduser() if words else Path(f"fugu-{sid}.{fmt}")
    text = export.render(export.session_document(open_store(), sid), fmt)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    _say(ctx, f"wrote this session ({fmt}) to {path}", "green")


def _resume(ctx: Context, arg: str) -> None:
    if not arg:
        _say(ctx, "usage: /resume ID (/sessions lists them)", "yellow")
        return
    ctx.switch_session(arg)


def _ultra(ctx: Context, arg: str) -> None:
    session = ctx.session
    if arg in ("on", "off"):
        session.set_ultra(arg == "on")
    elif arg:
        _say(ctx, "usage: /ultra on|off", "yellow")
        return
    if session.ultra:
        _say(ctx, "ultra mode is on: a conductor plans a workflow of workers for each turn (/ultra off)")
    else:
        _say(ctx, "ultra mode is off: the router picks a worker for each step (/ultra on)")


def _check(ctx: Context, arg: str) -> None:
    session = ctx.session
    if arg == "off":
        session.set_check(None)
    elif arg:
        session.set_check(arg)  # a command that cannot work is refused (said in red by dispatch)
    check = session.settings().check
    if check is None:
        _say(ctx, "no check: a turn ends when its worker says it is done (/check CMD to judge attempts)")
    else:
        _say(
            ctx,
            f"check: `{check.command}` judges each attempt; a failed one is set aside and the next worker "
            "tries (/check off)",
        )


def _memory(ctx: Context, arg: str) -> None:
    session = ctx.session
    files, budget = session.instruction_files()
    if files:
        used = sum(f.used for f in files)
        _say(ctx, f"instruction files (in the order given, {used:,} of {budget:,} tokens):", "bold")
        for f in files:
            _say(ctx, f"  {f.label}  {f.level}, {f.tokens:,} tokens, {f.state}")
    else:
        _say(ctx, "no instruction file (AGENTS.md or CLAUDE.md) was loaded", "dim")
    ctx.console.print(session.memory_text(), overflow="fold", markup=False)


def _mcp(ctx: Context, arg: str) -> None:
    mcp = ctx.session.mcp
    if mcp is None:
        _say(ctx, "no MCP server is configured (.mcp.json, or [mcp_servers.NAME] in config)", "dim")
        return
    for s in mcp.status():
        tools = [t.name for t in s.catalog.tools] if s.catalog else []
        known = f"{len(tools)} tools" + (" (from an earlier session)" if s.cached and tools else "")
        _say(ctx, f"{s.name}  {s.spec.transport}  {s.state}  {known}  [{s.spec.source}]")
        if s.error:
            _say(ctx, f"    {s.error}", "red")
        elif tools:
            _say(ctx, "    " + ", ".join(tools), "dim")


def _moves(name: str) -> Handler:
    """A command of ui/moves.py (imported when it runs)."""

    def run(ctx: Context, arg: str) -> None:
        from fugu_cli.ui import moves

        getattr(moves, name)(ctx.console, ctx.session, arg)

    return run


def _add_dir(ctx: Context, arg: str) -> None:
    from pathlib import Path

    session = ctx.session
    if not arg:
        added = session.settings().dirs
        _say(ctx, "folders beside the repository: " + (", ".join(map(str, added)) or "none"), "dim")
        return
    try:
        found = session.add_dir(Path(arg))
    except FuguError as e:
        _say(ctx, str(e).removeprefix("--add-dir "), "red")
        return
    mode = session.settings().mode
    how = "readable" if mode == "read-only" else "readable and, as the repository, editable"
    _say(ctx, f"added {found}: {how} by the tools from the next turn", "dim")


def _exit(ctx: Context, arg: str) -> None:
    ctx.stop()


# the names other coding CLIs give these commands, for hands used to them (a custom command comes first)
ALIASES = {"model": "worker", "new": "clear", "quit": "exit"}
COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        Command("help", "", "this list", _help),
        Command(
            "worker", "NAME|auto", "send every step to NAME (sticky), or let the router pick again", _worker
        ),
        Command("pool", "", "the workers, their prices and the router's last probabilities", _pool),
        Command("cost", "", "tokens, cost and context used of this session, per worker", _cost),
        Command("compact", "[FOCUS]", "replace older steps by a summary now (keeping FOCUS)", _compact),
        Command("map", "", "the repo map the workers get at the start of a turn", _map),
        Command("trace", "", "who did what in this session: each step's worker, why, tools, cost", _trace),
        Command("export", "[md|json|html] [FILE]", "write this session as a readable transcript", _export),
        Command("diff", "[PATH]", "uncommitted changes in the repository", _diff),
        Command("undo", "", "restore the files to before the last edited turn's first edit", _undo),
        Command(
            "commit", "[MESSAGE]", "commit every change (git add -A); default message: the last task", _commit
        ),
        Command("clear", "", "start a new session (the transcript starts empty)", _clear),
        Command("sessions", "", "recent sessions", _sessions),
        Command("resume", "ID", "switch to a past session", _resume),
        Command("ultra", "on|off", "let a conductor plan a multi-worker workflow for each turn", _ultra),
        Command(
            "check",
            "CMD|auto|off",
            "judge each attempt by CMD; escalate to the next worker when it fails",
            _check,
        ),
        Command("memory", "", "the instruction files loaded, and what ultra mode's agents learned", _memory),
        Command("mcp", "", "the MCP servers: status and tools", _mcp),
        Command(
            "plan",
            "[on|off]",
            "plan mode: explore read-only, then approve the plan to run it",
            _moves("plan"),
        ),
        Command("todos", "", "the workers' todo list", _moves("todos")),
        Command(
            "rewind",
            "[N [both|code|conversation]]",
            "back to any edit: files, conversation",
            _moves("rewind"),
        ),
        Command("agents", "", "the agents the workers may hand a subtask to (task)", _moves("agents")),
        Command("ps", "", "background commands the workers started", _moves("ps")),
        Command("stop", "ID", "stop a background command", _moves("stop")),
        Command("add-dir", "[DIR]", "let the tools reach a folder beside the repository too", _add_dir),
        Command("exit", "", "leave (Ctrl-D does too)", _exit),
    )
}
