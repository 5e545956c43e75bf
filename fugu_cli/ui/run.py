"""`fugu TASK` / `fugu -p`: build a session via app.py, render its events, print the answer, map exit codes;
without a task (and nothing piped), the REPL.

Renders text (compact progress lines on stderr, the answer on stdout), json (one object) or stream-json
(a line per event).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from fugu_cli.errors import FuguError
from fugu_cli.events import Event, result_json
from fugu_cli.options import RunOptions
from fugu_cli.types import TurnResult, dumps
from fugu_cli.ui.phrases import err

log = logging.getLogger("fugu")

EXIT_CODES = {
    "success": 0,
    "error_max_turns": 53,
    "error_max_budget": 1,
    "error_during_execution": 1,
    "interrupted": 130,
}


@dataclass(frozen=True)
class Output:
    """How a one-shot run shows itself (the session's options are `RunOptions`)."""

    task: str = ""
    print_mode: bool = False
    format: str = "text"  # text | json | stream-json


def main(opts: RunOptions, out: Output) -> int:
    task = out.task
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        task = f"{task}\n\n{piped}".strip() if task else piped.strip()
    if not task:
        if out.print_mode or not sys.stdin.isatty():
            err("no task given: pass it as an argument (fugu -p 'fix the tests') or on stdin")
            return 2
        from fugu_cli.ui import repl

        return repl.main(opts)
    try:
        return _one_shot(opts, out, task)
    except FuguError as e:
        err(str(e))
        return e.exit_code
    except Exception as e:  # a bug: the traceback goes to the log, one line to the screen
        from fugu_cli.logs import log_path

        log.error("the run failed", exc_info=e)
        err(f"internal error: {type(e).__name__}: {e} (details in {log_path()})")
        return 1


def _one_shot(opts: RunOptions, out: Output, task: str) -> int:
    from fugu_cli.app import build_session
    from fugu_cli.ui.turn import TurnThread

    session = build_session(opts)
    turn = TurnThread(session, task, _renderer(out.format, sys.stdout))
    with _interrupt_sets(turn.cancel):
        result = turn.run()
    _final(out.format, result, sys.stdout)
    return EXIT_CODES[result.status]


@contextmanager
def _interrupt_sets(cancel: threading.Event) -> Iterator[None]:
    """The first Ctrl-C asks the turn to stop (it records the cut step); a second one exits at once."""

    def on_sigint(signum: int, frame: object) -> None:
        if cancel.is_set():
            err("interrupted")
            os._exit(130)
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _renderer(output_format: str, out: IO[str]) -> Callable[[Event], None]:
    if output_format == "stream-json":

        def stream(event: Event) -> None:
            data = event.to_stream_json()
            if data is not None:
                out.write(dumps(data) + "\n")
                out.flush()

        return stream
    from fugu_cli.ui.render import Renderer, make_console

    return Renderer(make_console(stderr=True), compact=True).on_event


def _final(output_format: str, result: TurnResult, out: IO[str]) -> None:
    if output_format == "json":
        out.write(json.dumps(result_json(result), ensure_ascii=False) + "\n")
    elif output_format == "text":
        if result.status == "success":
            out.write(result.result.rstrip() + "\n")
        else:
            err(result.error or result.status)
        if result.denied:
            err(
                f"{len(result.denied)} tool call(s) were refused: "
                + "; ".join(d[:120] for d in result.denied)
            )
        cost = f"${result.usage.cost_usd:.4f}"
        used = ", ".join(f"{n} ×{w.steps}" for n, w in result.workers.items())
        print(
            f"  {result.num_turns} steps · {used or 'no worker'} · {cost} · session {result.session_id}",
            file=sys.stderr,
        )
    out.flush()
