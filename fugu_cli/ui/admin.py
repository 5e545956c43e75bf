"""The listing and router commands: `fugu pool`, `fugu sessions [show]`, `fugu router info|train|eval`.

Prints plain text or JSON; the work is done by app.py, the store, the ledger and fugu_cli/router.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.errors import FuguError, UsageError
from fugu_cli.ui.phrases import err, tool_summary


def pool_command(pool: str | None, json_out: bool) -> int:
    from fugu_cli.config import load_config
    from fugu_cli.options import RunOptions
    from fugu_cli.pool import POOL_HINT, check_pool, discover_pool

    try:
        config = load_config(Path.cwd(), RunOptions(pool=pool).overrides())
        workers, source = discover_pool(config, Path.cwd())
    except UsageError as e:
        err(str(e))
        return 2
    if not workers:
        err(f"no worker is configured: {POOL_HINT}")
        return 2
    checked = check_pool(workers)
    prices = {a.worker.name: _price(a.worker) for a in checked}
    windows = _windows(config, [a.worker for a in checked])
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
            table.append(("ok" if a.ok else "--", a.worker.name, a.worker.model, price, window, a.reason))
        widths = [max(len(r[i]) for r in table) for i in range(5)]
        for row in table:
            cells = [cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)]
            print("  " + "  ".join([*cells, row[5]]).rstrip())
    if not any(a.ok for a in checked):
        err(f"no usable worker: {POOL_HINT}")
        return 2
    return 0


def _windows(config: Any, workers: list[Any]) -> dict[str, tuple[Any, str]]:
    """Each worker's window (with its reply reserve) and tokenizer family (imports litellm)."""
    from fugu_cli.app import make_tokens

    tokens = make_tokens(config)
    return {w.name: (tokens.window(w), tokens.family(w)) for w in workers}


def _k(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n / 1000:.0f}k" if n >= 10_000 else f"{n:,}"


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
    return 0


@dataclass(frozen=True)
class TrainRequest:
    data: tuple[Path, ...]
    out: Path
    stage: str
    split: str | None
    tau: float | None
    svf: str
    generations: int
    lam: float
    seed: int
    threads: int | None
    store: bool
    prices: Path | None = None
    processes: int = 1
    executor: str | None = None  # local | ray (None: [executor] in the config)
    ray_address: str | None = None


def router_train(req: TrainRequest) -> int:
    from fugu_cli.router.commands import TrainOptions, train_command
    from fugu_cli.router.es import ESConfig, GenerationStats
    from fugu_cli.router.train import TrainConfig
    from fugu_cli.router.trainer import Stage2

    if req.stage not in ("sft", "es", "both"):
        err(f"--stage {req.stage}: choose sft, es or both")
        return 2
    config = TrainConfig(
        lam=req.lam,
        **({"taus": (req.tau,)} if req.tau is not None else {}),  # type: ignore[arg-type]
        svf_targets=tuple(t for t in req.svf.split(",") if t),
        seed=req.seed,
        threads=req.threads,
    )
    opts = TrainOptions(
        req.data,
        req.out,
        stage=req.stage,  # type: ignore[arg-type]
        split=req.split,
        config=config,
        stage2=Stage2(es=ESConfig(generations=req.generations, seed=req.seed, processes=req.processes)),
        store=req.store,
        prices=req.prices,
        processes=req.processes,
        executor=req.executor,
        ray_address=req.ray_address,
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


def router_eval(req: EvalRequest) -> int:
    from fugu_cli.router.commands import EvalOptions, eval_command
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
