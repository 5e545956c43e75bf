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

from fugu_cli.errors import FuguError, UsageError
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


def _options(req: Request, *, interactive: bool) -> Any:
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
        interactive=interactive,
        stream=req.output_format == "text" and sys.stdout.isatty(),
        ultra=req.ultra or None,
        plan=req.plan,
    )


def _repl(req: Request) -> int:
    from fugu_cli.ui import repl

    # the options are made in the REPL's loader thread: importing app.py would delay the first prompt
    launch = repl.Launch(
        options=lambda: _options(req, interactive=True),
        cwd=Path.cwd(),
        worker=req.worker,
        resuming=bool(req.resume or req.continue_last),
    )
    return repl.main(launch)


def _one_shot(req: Request, task: str) -> int:
    from fugu_cli.app import build_session

    session = build_session(_options(req, interactive=False))
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


def pool_command(pool: str | None, json_out: bool) -> int:
    from fugu_cli.app import RunOptions, check_pool, discover_pool, load_options_config
    from fugu_cli.pool import POOL_HINT

    try:
        config = load_options_config(RunOptions(pool=pool))
        workers, source = discover_pool(config, Path.cwd())
    except UsageError as e:
        err(str(e))
        return 2
    if not workers:
        err(f"no worker is configured: {POOL_HINT}")
        return 2
    checked = check_pool(workers)
    prices = {a.worker.name: _price(a.worker) for a in checked}
    if json_out:
        rows = [
            {
                "name": a.worker.name,
                "model": a.worker.model,
                "usable": a.ok,
                "reason": a.reason,
                "price_in": prices[a.worker.name][0],
                "price_out": prices[a.worker.name][1],
                "price_source": prices[a.worker.name][2],
                "priority": a.worker.priority,
            }
            for a in checked
        ]
        print(json.dumps({"source": source, "workers": rows}, indent=2))
    else:
        print(f"pool from {source}:")
        for a in checked:
            w = a.worker
            p_in, p_out, where = prices[w.name]
            price = f"${p_in:g}/${p_out:g} per M ({where})" if p_in is not None else "price unknown ($0)"
            mark = "ok " if a.ok else "-- "
            print(f"  {mark} {w.name:<18} {w.model:<40} {price:<28} {a.reason}")
    if not any(a.ok for a in checked):
        err(f"no usable worker: {POOL_HINT}")
        return 2
    return 0


def _price(w: Any) -> tuple[float | None, float | None, str]:
    """Per-million prices: the worker's own, else litellm's table (imports litellm, about 3 s)."""
    if w.price_in is not None or w.price_out is not None:
        return w.price_in or 0.0, w.price_out or 0.0, "pool"
    from fugu_cli.llm.client import table_price

    found = table_price(w.model)
    return (found[0], found[1], "litellm") if found else (None, None, "unknown")


def sessions_list(limit: int) -> int:
    from fugu_cli.app import open_store

    rows = open_store().list_sessions(limit)
    if not rows:
        print("no sessions yet")
        return 0
    import time

    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.updated_at))
        print(f"{r.id}  {when}  {r.mode:<5} ${r.cost_usd:<8.4f} {r.title[:60]}")
    return 0


def sessions_show(session_id: str) -> int:
    from fugu_cli.app import open_store
    from fugu_cli.ledger import Ledger, scopes

    store = open_store()
    row = store.get_session(session_id)
    if row is None:
        err(f"no session {session_id!r} (or the prefix is ambiguous); list them with: fugu sessions")
        return 2
    print(f"session {row.id} · {row.cwd} · {row.mode} · ${row.cost_usd:.4f}")
    for scope in scopes(store, row.id) or ["main"]:
        ledger = Ledger(store, row.id, scope)
        calls = ledger.tool_calls()
        if scope != "main":
            print(f"[{scope}]")
        for s in ledger.steps():
            p = s.scores.get(s.worker)
            why = (
                f"{s.source}"
                + (f", p={p:.2f}" if p is not None else "")
                + (f", {s.reason}" if s.reason else "")
            )
            print(f"turn {s.turn} step {s.step}: {s.worker} ({why}) · {s.status} · ${s.usage.cost_usd:.4f}")
            for c in calls:
                if (c.turn, c.step, c.agent) == (s.turn, s.step, s.worker):
                    flag = " denied" if c.denied else (" error" if c.is_error else "")
                    print(f"    {c.agent}: {tool_summary(c.tool, c.arguments, False)}{flag}")
    return 0


@dataclass(frozen=True)
class TrainRequest:
    data: Path
    out: Path
    stage: str
    split: str | None
    tau: float
    svf: str
    generations: int
    lam: float
    seed: int
    threads: int | None
    store: bool


def router_train(req: TrainRequest) -> int:
    from fugu_cli.router.es import ESConfig, GenerationStats
    from fugu_cli.router.train import TrainConfig, TrainOptions, train_command

    if req.stage not in ("sft", "es", "both"):
        err(f"--stage {req.stage}: choose sft, es or both")
        return 2
    config = TrainConfig(
        tau=req.tau, svf_targets=tuple(t for t in req.svf.split(",") if t), seed=req.seed, threads=req.threads
    )
    opts = TrainOptions(
        req.data,
        req.out,
        stage=req.stage,  # type: ignore[arg-type]
        split=req.split,
        config=config,
        es=ESConfig(generations=req.generations, seed=req.seed),
        lam=req.lam,
        store=req.store,
    )
    tty = sys.stderr.isatty()

    def on_generation(g: GenerationStats) -> None:
        done = g.generation + 1
        bar = "█" * (20 * done // req.generations)
        line = (
            f"es [{bar:<20}] generation {done}/{req.generations} · best {g.best:.4f} · "
            f"mean {g.mean:.4f} · incumbent {g.incumbent:.4f} · σ {g.sigma:.4f}"
        )
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    try:
        result = train_command(
            opts, on_log=lambda m: print(m, file=sys.stderr, flush=True), on_generation=on_generation
        )
    except FuguError as e:
        err(str(e))
        return e.exit_code
    if tty and result.history:
        print(file=sys.stderr)
    print(f"router checkpoint written to {result.checkpoint} (fugu router info {result.checkpoint})")
    return 0


def router_eval(
    data: Path,
    router: Path,
    split: str | None,
    k: int,
    json_out: bool,
    plot: Path | None,
    threads: int | None,
    store: bool,
) -> int:
    from fugu_cli.router.evaluate import EvalOptions, eval_command, render_text

    if not router.exists():
        err(f"router checkpoint {router} does not exist")
        return 2
    try:
        report = eval_command(EvalOptions(data, router, split, k, plot, threads=threads, store=store))
    except FuguError as e:
        err(str(e))
        return e.exit_code
    print(json.dumps(report) if json_out else render_text(report))
    if plot is not None:
        print(f"cost–quality curve written to {plot}", file=sys.stderr)
    return 0


def router_info(checkpoint: Path) -> int:
    from fugu_cli.router.checkpoint import info_text

    if not checkpoint.exists():
        err(f"{checkpoint} does not exist")
        return 2
    try:
        print(info_text(checkpoint))
    except (OSError, ValueError, KeyError) as e:
        err(f"cannot read {checkpoint}: {e}")
        return 2
    return 0


def no_color() -> bool:
    return bool(os.environ.get("NO_COLOR"))
