"""One-shot runs and the listing commands: build a session via app.py, render its events, map exit codes.

Renders text (progress lines on stderr, the answer on stdout), json (one object) or stream-json (a line per
event). The REPL lives in ui/repl.py.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fugu_cli.errors import FuguError
from fugu_cli.events import (
    Event,
    Notice,
    ProviderFailed,
    RouteChosen,
    StepFinished,
    ToolFinished,
    WorkflowAgentEvent,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
    result_json,
)
from fugu_cli.types import TurnResult, dumps

EXIT_CODES = {
    "success": 0,
    "error_max_turns": 53,
    "error_max_budget": 1,
    "error_during_execution": 1,
    "interrupted": 130,
}


@dataclass
class Request:
    task: str = ""
    print_mode: bool = False
    output_format: str = "text"
    max_turns: int | None = None
    max_budget_usd: float | None = None
    worker: str | None = None
    pool: str | None = None
    permission_mode: str | None = None
    continue_last: bool = False
    resume: str | None = None
    router: str | None = None
    cost_weight: float | None = None
    ultra: bool = False
    plan: Path | None = None
    verbose: bool = False


def err(text: str) -> None:
    print(f"fugu: {text}", file=sys.stderr)


def main(req: Request) -> int:
    task = req.task
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        task = f"{task}\n\n{piped}".strip() if task else piped.strip()
    if not task:
        if req.print_mode or not sys.stdin.isatty():
            err("no task given: pass it as an argument (fugu -p 'fix the tests') or on stdin")
            return 2
        return _repl(req)
    try:
        return _one_shot(req, task)
    except FuguError as e:
        err(str(e))
        return e.exit_code


def _options(req: Request) -> Any:
    from fugu_cli.app import RunOptions

    return RunOptions(
        cwd=Path.cwd(),
        pool=req.pool,
        worker=req.worker,
        router=req.router,
        cost_weight=req.cost_weight,
        permission_mode=req.permission_mode,
        max_turns=req.max_turns,
        max_budget_usd=req.max_budget_usd,
        resume=req.resume,
        continue_last=req.continue_last,
        stream=req.output_format == "text" and sys.stdout.isatty(),
        ultra=req.ultra or None,
        plan=req.plan,
    )


def _repl(req: Request) -> int:
    from fugu_cli.ui import repl

    # the options are made in the REPL's loader thread: importing app.py would delay the first prompt
    launch = repl.Launch(
        options=lambda: _options(req),
        cwd=Path.cwd(),
        worker=req.worker,
        resuming=bool(req.resume or req.continue_last),
    )
    return repl.main(launch)


def _one_shot(req: Request, task: str) -> int:
    from fugu_cli.app import build_session

    session = build_session(_options(req))
    out = sys.stdout
    emit = _renderer(req, out)
    cancel = threading.Event()
    box: dict[str, TurnResult | BaseException] = {}

    def work() -> None:
        try:
            box["result"] = session.run_turn(task, emit, cancel)
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=work, name="fugu-turn", daemon=True)
    with _interrupt_sets(cancel):
        thread.start()
        while thread.is_alive():
            thread.join(0.1)
    if "error" in box:
        error = box["error"]
        assert isinstance(error, BaseException)
        raise error
    result = box["result"]
    assert isinstance(result, TurnResult)
    _final(req, result, out)
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


def _renderer(req: Request, out: IO[str]) -> Callable[[Event], None]:
    if req.output_format == "stream-json":

        def stream(event: Event) -> None:
            data = event.to_stream_json()
            if data is not None:
                out.write(dumps(data) + "\n")
                out.flush()

        return stream
    progress = Progress(sys.stderr)
    return progress.on_event


def _final(req: Request, result: TurnResult, out: IO[str]) -> None:
    if req.output_format == "json":
        out.write(json.dumps(result_json(result), ensure_ascii=False) + "\n")
    elif req.output_format == "text":
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


class Progress:
    """Plain progress lines: `↳ worker (p=0.61, 18 ms) · read a.py · edit a.py (+3 −1) · $0.0012`."""

    def __init__(self, stream: IO[str], prefix: str = "") -> None:
        self.stream = stream
        self.route: RouteChosen | None = None
        self.tools: list[str] = []
        self.prefix = prefix  # ultra mode: each workflow step's agent gets its own Progress, tagged "[i] "
        self.steps: dict[int, Progress] = {}

    def on_event(self, event: Event) -> None:
        if isinstance(event, WorkflowAgentEvent) and event.inner is not None:
            sub = self.steps.setdefault(event.step, Progress(self.stream, f"{self.prefix}  [{event.step}] "))
            sub.on_event(event.inner)
            return
        line = workflow_line(event)
        if line:
            self.stream.write(f"{self.prefix}{line}\n")
            self.stream.flush()
        elif isinstance(event, RouteChosen):
            self.route, self.tools = event, []
        elif isinstance(event, ToolFinished) and event.call and event.result:
            r = event.result
            self.tools.append(tool_summary(event.call.name, event.call.arguments, r.is_error, r.exit_code))
        elif isinstance(event, StepFinished) and self.route and self.route.decision:
            d = self.route.decision
            p = d.scores.get(d.worker, 0.0)
            head = f"{self.prefix}↳ {d.worker} (p={p:.2f}, {d.latency_ms:.0f} ms, {d.source})"
            parts = [head, *self.tools, f"${event.usage.cost_usd:.4f}"]
            self.stream.write(" · ".join(parts) + "\n")
            self.stream.flush()
        elif isinstance(event, ProviderFailed):
            self.stream.write(f"✗ {event.worker} failed: {event.error}\n")
        elif isinstance(event, Notice) and event.level in ("warning", "error"):
            self.stream.write(f"! {event.text}\n")


def workflow_line(event: Event) -> str | None:
    """Ultra mode's progress: the plan, then each step starting and finishing."""
    if isinstance(event, WorkflowPlanned):
        inner = f" for step {event.parent_step}" if event.parent_step is not None else ""
        n = len(event.steps)
        rows = [f"◆ workflow {event.workflow}{inner} ({event.source}, {n} step{'' if n == 1 else 's'})"]
        for s in event.steps:
            access = f" ← {', '.join(map(str, s['access']))}" if s["access"] else ""
            rows.append(f"  {s['step']}. {s['worker']}{access}: {' '.join(str(s['subtask']).split())[:100]}")
        return "\n".join(rows)
    if isinstance(event, WorkflowStepStarted):
        return f"▸ step {event.step} · {event.worker} started"
    if isinstance(event, WorkflowStepFinished):
        mark = "✓" if event.status == "success" else "✗"
        took = f"{event.elapsed_s:.1f} s · ${event.cost_usd:.4f}"
        return f"{mark} step {event.step} · {event.worker} · {event.status} · {took}"
    return None


def tool_summary(name: str, arguments: str, is_error: bool, exit_code: int | None = None) -> str:
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    if name == "shell":
        text = f"$ {str(args.get('command', ''))[:60]}"
    elif name in ("read_file", "write_file", "edit_file"):
        text = f"{name.split('_')[0]} {args.get('path', '?')}"
    elif name in ("glob", "grep"):
        text = f"{name} {args.get('pattern', '')}"
    else:
        text = name
    if exit_code:
        text += f" (exit {exit_code})"
    return text + (" ✗" if is_error else "")
