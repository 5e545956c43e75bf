"""The listing and router commands: `fugu pool`, `fugu sessions [show]`, `fugu router info|train|eval`.

Prints plain text or JSON; the work is done by app.py, the store, the ledger and fugu_cli/router.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fugu_cli.errors import FuguError, UsageError
from fugu_cli.ui.phrases import err, record_text, tool_summary

if TYPE_CHECKING:
    from fugu_cli.calls import Condition
    from fugu_cli.router.commands import TrainOptions
    from fugu_cli.router.es import GenerationStats


def pool_command(pool: str | None, json_out: bool, reset_health: bool = False) -> int:
    from fugu_cli.app import worker_health
    from fugu_cli.config import load_config
    from fugu_cli.options import RunOptions
    from fugu_cli.pool import POOL_HINT, check_pool, discover_pool, unusable_hint

    try:
        config = load_config(Path.cwd(), RunOptions(pool=pool).overrides())
        workers, source = discover_pool(config, Path.cwd())
    except UsageError as e:
        err(str(e))
        return 2
    health = worker_health(config)
    if reset_health:
        err(f"forgot the failures of {health.forget()} worker(s): every worker is tried again")
    if not workers:
        err(f"no worker is configured: {POOL_HINT}")
        return 2
    checked = check_pool(workers)
    from fugu_cli.app import kept_model_info

    info = kept_model_info()
    prices = {a.worker.name: _price(a.worker, info) for a in checked}
    windows = _windows(config, [a.worker for a in checked])
    ailing = health.report(workers)
    now = health.clock()
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
                **windows[a.worker.name][0].to_json(),
                "tokenizer": windows[a.worker.name][1],
                "health": _health_json(ailing.get(a.worker.name), now),
            }
            for a in checked
        ]
        print(json.dumps({"source": source, "workers": rows}, indent=2))
    else:
        print(f"pool from {source}:")
        table: list[tuple[str, ...]] = []
        for a in checked:
            p_in, p_out, where = prices[a.worker.name]
            price = f"${p_in:g}/${p_out:g} per M ({where})" if p_in is not None else "price unknown ($0)"
            win = windows[a.worker.name][0]
            window = f"{_k(win.tokens)} ctx, {_k(win.reserve)} out ({win.source})"
            sick = ailing.get(a.worker.name)
            why = "; ".join(x for x in (a.reason, sick.describe(now) if sick else "") if x)
            table.append(("ok" if a.ok else "--", a.worker.name, a.worker.model, price, window, why))
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        for row in table:
            cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
            print("  " + "  ".join([*cells, row[5]]).rstrip())
    if not any(a.ok for a in checked):
        err(f"no usable worker: {unusable_hint(source)}")
        return 2
    return 0


def _health_json(sick: Condition | None, now: float) -> dict[str, Any]:
    if sick is None:
        return {"state": "ok"}
    state = "cooling" if sick.cooling(now) else "probation"
    return {
        "state": state,
        "retry_in_s": round(sick.left_s(now), 1),
        "failures": sick.failures,
        "error": sick.error,
    }


def _windows(config: Any, workers: list[Any]) -> dict[str, tuple[Any, str]]:
    """Each worker's window (with its reply reserve) and tokenizer family (imports litellm)."""
    from fugu_cli.app import make_tokens

    tokens = make_tokens(config)
    return {w.name: (tokens.window(w), tokens.family(w)) for w in workers}


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n / 1000:.0f}k" if n >= 10_000 else f"{n:,}"


def _price(w: Any, info: Any) -> tuple[float | None, float | None, str]:
    """Per-million prices: the worker's own, else litellm's table (its kept answers: litellm, about 3 s, is
    imported only for a model met for the first time)."""
    if w.price_in is not None or w.price_out is not None:
        return w.price_in or 0.0, w.price_out or 0.0, "pool"
    from fugu_cli.llm.client import table_price

    found = table_price(w.model, info)
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
    from fugu_cli.ledger import Ledger

    store = open_store()
    row = store.get_session(session_id)
    if row is None:
        err(f"no session {session_id!r} (or the prefix is ambiguous); list them with: fugu sessions")
        return 2
    print(f"session {row.id} · {row.cwd} · {row.mode} · ${row.cost_usd:.4f}")
    for ledger in Ledger(store, row.id).all_scopes():
        calls = ledger.tool_calls()
        if ledger.scope != "main":
            print(f"[{ledger.scope}]")
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
                    print(f"    {c.agent}: {tool_summary(c.tool, c.arguments)}{flag}")
    for note in dict.fromkeys(n.text for n in store.notes(row.id)):
        print(f"not honoured: {note}")
    numbers: dict[int, int] = {}
    for turn, attempt in store.attempts(row.id):
        numbers[turn] = numbers.get(turn, 0) + 1
        print(f"turn {turn} attempt {numbers[turn]}: {record_text(attempt)}")
    return 0


def sessions_export(session_id: str, fmt: str, out: Path | None) -> int:
    """Write the session as Markdown, JSON or HTML to `out` (stdout when None)."""
    from fugu_cli.app import open_store
    from fugu_cli.ui import export

    store = open_store()
    row = store.get_session(session_id)
    if row is None:
        err(f"no session {session_id!r} (or the prefix is ambiguous); list them with: fugu sessions")
        return 2
    text = export.render(export.session_document(store, row.id), fmt)
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        err(f"cannot write {out}: {e.strerror or e}")
        return 2
    err(f"wrote session {row.id} to {out}")
    return 0


def router_train(opts: TrainOptions) -> int:
    """`fugu router train`: the stages, with a progress bar (and the time left) on stderr."""
    from fugu_cli.router.commands import train_command
    from fugu_cli.ui.train_bar import TrainBar

    generations = opts.stage2.es.generations
    bar = TrainBar(tty=sys.stderr.isatty())

    def on_generation(g: GenerationStats) -> None:
        detail = f"best {g.best:.4f} · incumbent {g.incumbent:.4f} · σ {g.sigma:.3f}"
        bar.update("stage 2 generation", g.generation + 1, generations, detail)

    def on_log(message: str) -> None:
        bar.end()
        print(message, file=sys.stderr, flush=True)

    try:
        result = train_command(opts, on_log=on_log, on_generation=on_generation, on_progress=bar.update)
    except FuguError as e:
        bar.end()
        err(str(e))
        return e.exit_code
    bar.end()
    print(f"router checkpoint written to {result.checkpoint} (fugu router info {result.checkpoint})")
    return 0


@dataclass(frozen=True)
class EvalRequest:
    data: Path
    router: Path
    split: str | None
    k: int
    json_out: bool
    plot: Path | None
    threads: int | None
    store: bool
    train_data: tuple[Path, ...] = ()
    allow_train_rows: bool = False
    skip_train_rows: bool = False
    prices: Path | None = None
    lambdas: tuple[float, ...] = ()
    verifier_accuracy: float = 0.9
    worlds: int = 5


def router_eval(req: EvalRequest) -> int:
    from fugu_cli.router.eval_command import EvalOptions, eval_command
    from fugu_cli.router.report import render_text

    if not req.router.exists():
        err(f"router checkpoint {req.router} does not exist")
        return 2
    opts = EvalOptions(
        req.data,
        req.router,
        req.split,
        req.k,
        req.plot,
        threads=req.threads,
        store=req.store,
        train_data=req.train_data,
        allow_train_rows=req.allow_train_rows,
        skip_train_rows=req.skip_train_rows,
        prices=req.prices,
        lambdas=req.lambdas,
        verifier_accuracy=req.verifier_accuracy,
        worlds=req.worlds,
    )
    try:
        report = eval_command(opts)
    except FuguError as e:
        err(str(e))
        return e.exit_code
    print(json.dumps(report) if req.json_out else render_text(report))
    if req.plot is not None:
        print(f"reward–cost curves written to {req.plot}", file=sys.stderr)
    return 0


def router_info(checkpoint: str | None, pool: str | None = None) -> int:
    """What a checkpoint holds; "default" is the shipped one, "prior" the rule without a checkpoint; none:
    the router a session here would use, and why."""
    from fugu_cli.app import default_checkpoint
    from fugu_cli.router.checkpoint import info_text

    if checkpoint is None:
        return _session_router(pool)
    if checkpoint == "prior":
        print(
            "prior: no checkpoint; workers by configured priority, then how well a description fits the task"
        )
        return 0
    path = default_checkpoint() if checkpoint == "default" else Path(checkpoint)
    return _checkpoint_info(path, info_text)


def _session_router(pool: str | None) -> int:
    from fugu_cli.app import router_choice
    from fugu_cli.config import load_config
    from fugu_cli.options import RunOptions
    from fugu_cli.pool import check_pool, discover_pool
    from fugu_cli.router.checkpoint import info_text

    try:
        config = load_config(Path.cwd(), RunOptions(pool=pool).overrides())
        workers, _ = discover_pool(config, Path.cwd())
        usable = [a.worker for a in check_pool(workers) if a.ok]
        source, why = router_choice(config, usable)
    except FuguError as e:
        err(str(e))
        return e.exit_code
    print(f"a session here uses {source.name}: {why}")
    if source.checkpoint is None:
        return 0
    print()
    return _checkpoint_info(source.checkpoint, info_text)


def _checkpoint_info(checkpoint: Path, info_text: Any) -> int:
    if not checkpoint.exists():
        err(f"{checkpoint} does not exist")
        return 2
    try:
        print(info_text(checkpoint))
    except (OSError, ValueError, KeyError) as e:
        err(f"cannot read {checkpoint}: {e}")
        return 2
    return 0
