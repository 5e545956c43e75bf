"""`fugu TASK` / `fugu -p`: build a session via app.py, render its events, print the answer, map exit codes;
without a task (and nothing piped), the REPL. With `--input-format stream-json` it is a conversation: user
messages and control requests arrive as JSON lines on stdin (ui/stream.py), one turn per message.

Renders text (compact progress lines on stderr, the answer on stdout), json (one object) or stream-json
(a line per event, Claude Code's shapes). Signals are ui/stop.py's.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from fugu_cli.errors import FuguError, UsageError
from fugu_cli.events import (
    AssistantMessage,
    Event,
    SessionStarted,
    TurnFinished,
    result_json,
    unwrap,
)
from fugu_cli.options import RunOptions
from fugu_cli.types import Image, TurnResult, Usage, WorkerUsage
from fugu_cli.ui.custom import Prompted, described
from fugu_cli.ui.initialize import InitializeAsks, leading_initialize, read_initialize, refusal
from fugu_cli.ui.phrases import err
from fugu_cli.ui.stop import GRACE_S, GaveUp, Stopper
from fugu_cli.ui.stream import Asker, Controls, Inbox, LineWriter, UserTurn, stdin_lines

if TYPE_CHECKING:
    from fugu_cli.session import Session

log = logging.getLogger("fugu")

EXIT_CODES = {
    "success": 0,
    "error_max_turns": 53,
    "error_max_budget": 1,
    "error_during_execution": 1,
    "interrupted": 130,
}
HOW_TO_ALLOW = (
    "allow them with --permission-mode acceptEdits (edits) or bypassPermissions / --yes (edits and "
    "commands), or some of them with --allowedTools 'Bash(pytest:*),Edit'"
)


@dataclass(frozen=True)
class Output:
    """How a one-shot run shows itself (the session's options are `RunOptions`)."""

    task: str = ""
    print_mode: bool = False
    format: str = "text"  # text | json | stream-json
    input_format: str = "text"  # text | stream-json
    ask_client: bool = False  # --permission-prompt-tool stdio: the client answers permission questions
    notes: tuple[str, ...] = ()  # flags honoured only partly: said once on stderr
    await_initialize: bool = False  # --await-initialize: wait for the client's initialize before anything


@dataclass(frozen=True)
class Flags:
    """The run command's flags in Claude Code's vocabulary, as given; `settle` folds them into the options."""

    model: str | None = None
    permission_mode: str | None = None
    yes: bool = False
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    tools: str | None = None
    system_prompt: str | None = None
    system_prompt_file: Path | None = None
    append_system_prompt: str | None = None
    prompt_tool: str | None = None
    partial: bool = False
    permission_prompts: str | None = None  # --permission-prompts host|none: who answers the questions


def settle(opts: RunOptions, out: Output, flags: Flags) -> tuple[RunOptions, Output]:
    """Run options and output with `flags` folded in; a UsageError says what fugu cannot honour."""
    from fugu_cli.compat import tool_rules
    from fugu_cli.options import permission_mode

    if opts.worker and flags.model and flags.model != opts.worker:
        raise UsageError(f"--worker {opts.worker} and --model {flags.model} disagree; give one of them")
    if flags.permission_prompts not in (None, "host", "none"):
        raise UsageError(f"--permission-prompts {flags.permission_prompts}: choose host or none")
    if flags.permission_prompts == "none" and flags.prompt_tool is not None:
        raise UsageError("--permission-prompts none: nobody answers, so --permission-prompt-tool cannot ask")
    if flags.prompt_tool is not None and (flags.prompt_tool != "stdio" or out.input_format != "stream-json"):
        raise UsageError(
            f"--permission-prompt-tool {flags.prompt_tool}: fugu can ask only its stream-json client "
            "(--permission-prompt-tool stdio --input-format stream-json), not an MCP tool"
        )
    prompt = flags.system_prompt
    if flags.system_prompt_file is not None:
        try:
            prompt = flags.system_prompt_file.read_text(encoding="utf-8-sig")
        except OSError as e:
            raise UsageError(f"--system-prompt-file {flags.system_prompt_file}: {e.strerror or e}") from None
    rules = tool_rules(flags.allowed_tools, flags.disallowed_tools, flags.tools)
    partial = flags.partial and out.format == "stream-json"
    notes = ("--include-partial-messages: fugu sends the workers' text deltas only",) if partial else ()
    mode = permission_mode(flags.permission_mode) if flags.permission_mode else None
    opts = dataclasses.replace(
        opts,
        worker=opts.worker or flags.model,
        permission_mode="full-auto" if flags.yes else mode,
        stream=opts.stream or partial,
        system_prompt=prompt or None,
        append_system_prompt=flags.append_system_prompt or None,
        allow=rules.allow,
        deny=rules.deny,
        hidden_tools=rules.remove,
        only_tools=rules.only,
    )
    out = dataclasses.replace(
        out, ask_client=flags.prompt_tool == "stdio", notes=(*out.notes, *notes, *rules.notes)
    )
    return opts, out


IMAGE_TASK = "--image goes with a task: fugu -p TASK --image FILE (in the REPL, name the picture: @shot.png)"


def main(opts: RunOptions, out: Output, flags: Flags | None = None) -> int:
    given, asked, flags = opts, out, flags or Flags()
    try:
        opts, out = settle(opts, out, flags)
    except UsageError as e:
        err(str(e))
        return e.exit_code
    if out.input_format == "stream-json":  # settled again once the client's initialize is read
        if opts.images:
            err(IMAGE_TASK)
            return 2
        return _guarded(lambda: _conversation(given, asked, flags))
    for note in out.notes:
        err(note)
    task = readable(out.task)
    if not sys.stdin.isatty():
        piped = readable(sys.stdin.buffer.read())
        task = f"{task}\n\n{piped}".strip() if task else piped.strip()
    if not task:
        if out.print_mode or not sys.stdin.isatty():
            err("no task given: pass it as an argument (fugu -p 'fix the tests') or on stdin")
            return 2
        if opts.images:
            err(IMAGE_TASK)
            return 2
        from fugu_cli.ui import repl

        return repl.main(opts)
    return _guarded(lambda: _one_shot(opts, out, task))


def _guarded(run: Callable[[], int]) -> int:
    try:
        return run()
    except FuguError as e:
        err(str(e))
        return e.exit_code
    except Exception as e:  # a bug: the traceback goes to the log, one line to the screen
        from fugu_cli.logs import log_path

        log.error("the run failed", exc_info=e)
        err(f"internal error: {type(e).__name__}: {e} (details in {log_path()})")
        return 1


def readable(raw: str | bytes) -> str:
    """Text from argv or stdin as UTF-8, bytes that are not UTF-8 shown as U+FFFD (never a crash later)."""
    if isinstance(raw, str):  # argv: Python keeps undecodable bytes as surrogates
        raw = raw.encode("utf-8", "surrogateescape")
    return raw.decode("utf-8", "replace")


def _one_shot(opts: RunOptions, out: Output, task: str) -> int:
    from fugu_cli.app import build_session

    given = flag_images(opts)  # a picture that cannot be sent is a usage error before anything starts
    with Stopper().installed() as stopper:  # a signal while the session is built still ends in a result
        session = build_session(opts, router_process=True)
        try:
            images = task_images(given, task, session.roots())
            _say_refusals(session, opts)
            result = _turn(session, task, _Render(out.format, sys.stdout), stopper, images)
        finally:
            session.close()
    _final(out.format, result, sys.stdout)
    return stopper.code or EXIT_CODES[result.status]


def _conversation(given: RunOptions, out: Output, flags: Flags) -> int:
    """Turns from stdin until it ends (or a signal stops the run); the exit code is the last turn's. A
    leading `initialize` is read first: what it asks for shapes the session."""
    if out.format != "stream-json":
        raise UsageError("--input-format stream-json needs --output-format stream-json")
    from fugu_cli.app import build_session, repo_root

    render = _Render(out.format, sys.stdout)
    lines = iter(stdin_lines())
    folders = (given.cwd, repo_root(given.cwd))
    stopper = Stopper()
    with stopper.installed():
        wait = out.await_initialize or not out.task.strip()
        head, request = (
            leading_initialize(lines, out.await_initialize, lambda: stopper.code is not None)
            if wait
            else ([], None)
        )
        if stopper.code is not None:
            return stopper.code
        asks: InitializeAsks | None = None
        if request is not None:
            try:
                asks = read_initialize(request.get("request") or {}, folders)
            except UsageError as e:
                render.lines.write(refusal(request, str(e)))
                raise
            flags = dataclasses.replace(
                flags, disallowed_tools=(*flags.disallowed_tools, *asks.disallowed_tools)
            )
        opts, out = settle(given, out, flags)
        opts = asks.fold(opts) if asks is not None else opts
        for note in out.notes:
            err(note)
        asker = Asker(render.lines, stopper.interrupt) if out.ask_client else None
        session = build_session(opts, approver=asker, router_process=True)
        if asks is not None and asks.title:
            session.deps.store.touch_session(session.id, title=asks.title)
        if asker is None:
            _say_refusals(session, opts)
        else:
            render.observers.append(asker.see)
        code = 0
        controls = _controls(session, stopper, asker, asks, folders)
        inbox = Inbox(itertools.chain(head, lines), render.lines, controls, asker).start()
        pending: list[UserTurn] = [UserTurn(out.task)] if out.task.strip() else []
        while stopper.code is None:
            item = pending.pop(0) if pending else inbox.next(0.1)
            if item is None:
                break
            if isinstance(item, UserTurn):
                code = EXIT_CODES[_turn(session, item.text, render, stopper, item.images).status]
    session.close()
    return stopper.code or code


def flag_images(opts: RunOptions) -> list[Image]:
    """The `--image FILE`s; a usage error when one cannot be sent."""
    from fugu_cli.tools.images import NotAnImage, load_image

    images: list[Image] = []
    for path in opts.images:
        try:
            images.append(load_image(opts.cwd / path, str(path)))
        except NotAnImage as e:
            raise UsageError(f"--image {path}: {e}") from None
    return images


def task_images(given: Sequence[Image], task: str, roots: Sequence[Path]) -> list[Image]:
    """The pictures of a one-shot task: `given` (--image) and the images the task names (`@shot.png`, a
    pasted path); a usage error when a named one cannot be sent."""
    from fugu_cli.tools.images import prompt_images

    named, problems = prompt_images(task, roots)
    if problems:
        raise UsageError(problems[0])
    return [*given, *(i for i in named if i not in given)]


def _turn(
    session: Session, text: str, render: _Render, stopper: Stopper, images: Sequence[Image] = ()
) -> TurnResult:
    """One turn; a task that is a custom command or an MCP prompt (`/fix-issue 12`) runs as its prompt."""
    from fugu_cli.ui.turn import TurnThread

    prompted = _slash(session, text)
    if prompted is not None:
        for note in prompted.notes:
            err(note)
        text = prompted.prompt
    from fugu_cli.turn_settings import Overrides

    overrides = Overrides(prompted.worker, tuple(prompted.allow)) if prompted is not None else None
    turn = TurnThread(session, text, render.on_event, overrides, images)
    stopper.attach(turn.cancel, turn.done)
    try:
        return turn.run(wait=stopper.wait)
    except GaveUp:
        result = render.cut(session.id)
        render.on_event(TurnFinished(session_id=session.id, result=result))
        render.closed = True  # the stuck turn may still emit; nothing of it reaches stdout now
        return result


def _slash(session: Session, text: str) -> Prompted | None:
    """The custom command or MCP prompt `text` names, with `@server:uri` resources attached to any task."""
    from fugu_cli.ui.commands import parse
    from fugu_cli.ui.custom import attach_resources, resolve

    parsed = parse(text.strip())
    prompted = resolve(session, *parsed) if parsed is not None else None
    task = prompted.prompt if prompted is not None else text
    task, attached = attach_resources(task, session)
    if prompted is None and not attached:
        return None
    if prompted is None:
        return Prompted(task)
    return dataclasses.replace(prompted, prompt=task)


def _controls(
    session: Session,
    stopper: Stopper,
    asker: Asker | None,
    asks: InitializeAsks | None = None,
    folders: tuple[Path, ...] = (),
) -> Controls:
    from fugu_cli.app import worker_named
    from fugu_cli.options import permission_mode

    def models() -> list[dict[str, str]]:
        auto = {"value": "auto", "displayName": "auto", "description": "the router picks a worker per step"}
        rows = [
            {"value": w.name, "displayName": w.name, "description": w.description or w.model}
            for w in session.pool
        ]
        return [auto, *rows]

    def interrupt() -> None:
        stopper.interrupt()
        if asker is not None:  # a question the turn waits on will not be answered now
            asker.close()
            asker.reopen()

    return Controls(
        models=models,
        interrupt=interrupt,
        set_permission_mode=lambda name: (
            session.set_planning(True)
            if name == "plan"
            else session.set_permission_mode(permission_mode(name))
        ),
        set_model=lambda model: session.set_worker(worker_named(session.pool, model)),
        mcp_status=lambda: [{"name": n, "status": s} for n, s in session.mcp_servers()],
        commands=lambda: [
            {"name": name, "description": help, "argumentHint": hint}
            for name, help, hint in described(session.root, session)
        ],
        asks=asks,
        folders=folders,
    )


def _say_refusals(session: Session, opts: RunOptions) -> None:
    """Without a terminal nobody can approve: say so at the start, with how to allow what the run needs."""
    permission = session.settings().permission
    if permission.mode != "ask" or opts.permission_mode is not None:
        return
    which = "that no allow rule covers " if permission.allow else ""
    err(f"edits and shell commands {which}will be refused: there is no terminal to ask; {HOW_TO_ALLOW}")


class _Render:
    """Where a turn's events go (a line each in stream-json, progress lines on stderr otherwise), and what
    they add up to, for a turn that cannot finish after a forced stop."""

    def __init__(self, output_format: str, out: IO[str]) -> None:
        self.format = output_format
        self.lines = LineWriter(out)
        self.closed = False
        self.observers: list[Callable[[Event], None]] = []
        self._show: Callable[[Event], None] | None = None
        if output_format != "stream-json":
            from fugu_cli.ui.progress import ProgressLines

            self._show = ProgressLines(waiting=True).on_event
        self._started = time.monotonic()
        self._seen: list[AssistantMessage] = []

    def on_event(self, event: Event) -> None:
        if self.closed:
            return
        self._count(event)
        for observe in self.observers:
            observe(event)
        if self._show is not None:
            self._show(event)
            return
        data = event.to_stream_json()
        if data is not None:
            self.lines.write(data)

    def _count(self, event: Event) -> None:
        if isinstance(event, SessionStarted):
            self._started, self._seen = time.monotonic(), []
        event = unwrap(event)
        if isinstance(event, AssistantMessage):
            self._seen.append(event)

    def cut(self, session_id: str) -> TurnResult:
        """The result of a turn that did not finish within GRACE_S of a forced stop, from its events."""
        workers: dict[str, WorkerUsage] = {}
        for m in self._seen:
            name = m.message.worker or m.model
            workers[name] = workers.get(name, WorkerUsage()) + WorkerUsage.of_step(m.model, m.usage)
        error = f"interrupted; the turn did not stop within {GRACE_S:g} s and was abandoned"
        return TurnResult(
            status="interrupted",
            result=error,
            session_id=session_id,
            num_turns=len(self._seen),
            usage=sum((m.usage for m in self._seen), Usage()),
            workers=workers,
            error=error,
            duration_ms=(time.monotonic() - self._started) * 1000.0,
            duration_api_ms=sum(m.api_ms for m in self._seen),
        )


def _final(output_format: str, result: TurnResult, out: IO[str]) -> None:
    if output_format == "json":
        out.write(json.dumps(result_json(result), ensure_ascii=False) + "\n")
    elif output_format == "text":
        if result.status == "success":
            out.write(result.result.rstrip() + "\n")
        else:
            err(result.error or result.status)
        if result.denied:
            refused = "; ".join(f"{d.tool_name}: {d.reason[:120]}" for d in result.denied)
            err(f"{len(result.denied)} tool call(s) were refused: {refused}")
        cost = f"${result.usage.cost_usd:.4f}"
        used = ", ".join(f"{n} ×{w.steps}" for n, w in result.workers.items())
        steps = f"{result.num_turns} step" + ("" if result.num_turns == 1 else "s")
        print(
            f"  {steps} · {used or 'no worker'} · {cost} · session {result.session_id}",
            file=sys.stderr,
        )
    out.flush()
