"""`fugu conductor train` and `fugu conductor eval`: what the CLI calls. Builds the environment (replay on an
outcome folder, or live on a suite against the pool), shows a progress line per GRPO step (reward, parse rate,
time left) on stderr, prints the eval report (text, or `--json`) on stdout.

Never imports ui or cli.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.conductor.lm import LMConfig
from fugu_cli.conductor.replay import Rules
from fugu_cli.errors import FuguError, UsageError


@dataclass(frozen=True)
class TrainRequest:
    data: Path | None
    base: Path
    out: Path
    lm: LMConfig = field(default_factory=LMConfig)
    rules: Rules = field(default_factory=Rules)
    split: str | None = None
    min_workers: int = 2
    max_workers: int = 5
    env: str = "replay"  # replay | live
    suite: str | None = None  # live: the suite to run
    pool: str | None = None  # live: a pool file


def _err(text: str) -> None:
    print(f"fugu: {text}", file=sys.stderr, flush=True)


def train_main(req: TrainRequest) -> int:
    from fugu_cli.conductor.train import StepStats, TrainSpec, train

    tty = sys.stderr.isatty()

    def on_step(s: StepStats) -> None:
        bar = "█" * (20 * s.step // max(s.steps, 1))
        line = (
            f"grpo [{bar:<20}] step {s.step}/{s.steps} · reward {s.reward:.3f} · parse {s.parse_rate:.0%} · "
            f"right {s.right:.0%} · {s.elapsed_s:.0f} s, about {s.left_s:.0f} s left"
        )
        print(("\r" + line) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    def log(m: str) -> None:
        print(m, file=sys.stderr, flush=True)

    try:
        if req.env not in ("replay", "live"):
            raise UsageError(f"--env {req.env}: choose replay or live")
        spec = TrainSpec(
            data=req.data or Path(req.suite or "."),
            base=req.base,
            out=req.out,
            split=req.split,
            lm=req.lm,
            rules=req.rules,
            min_workers=req.min_workers,
            max_workers=req.max_workers,
        )
        if req.env == "live":
            meta = _train_live(req, spec, on_step, log)
        else:
            if req.data is None:
                raise UsageError(
                    "--data DIR is needed with --env replay (an outcome folder with dataset.toml)"
                )
            meta = train(spec, on_step=on_step, on_log=log)
    except FuguError as e:
        _err(str(e))
        return e.exit_code
    if tty:
        print(file=sys.stderr)
    took = f"{meta['wall_s']:.0f} s, peak memory {meta['peak_memory_mb']:.0f} MB"
    print(
        f"conductor written to {req.out} ({took}); "
        f"judge it: fugu conductor eval --data DIR --conductor {req.out}"
    )
    return 0


def _train_live(req: TrainRequest, spec: Any, on_step: Any, log: Any) -> dict[str, Any]:
    from fugu_cli.app import open_store, resolve
    from fugu_cli.conductor.train import train
    from fugu_cli.eval.conductor_env import LiveEnvironment, suite_matrix
    from fugu_cli.eval.suite import load_suite
    from fugu_cli.options import RunOptions

    if req.suite is None:
        raise UsageError("--env live needs --suite (a suite folder or a shipped suite's name, e.g. pyfix)")
    suite = load_suite(req.suite)
    resolved = resolve(RunOptions(pool=req.pool, max_turns=suite.max_turns))
    store = open_store()
    try:
        env = LiveEnvironment(suite, resolved, req.rules, store)
        return train(spec, env=env, on_step=on_step, on_log=log, data=suite_matrix(suite, resolved))
    finally:
        store.close()


def eval_main(spec: Any, json_out: bool) -> int:
    from fugu_cli.conductor.evaluate import evaluate

    try:
        report = evaluate(spec)
    except FuguError as e:
        _err(str(e))
        return e.exit_code
    print(json.dumps(report) if json_out else render_text(report))
    return 0


def render_text(report: dict[str, Any]) -> str:
    """The eval report as a table: one line per method."""

    def money(v: float | None) -> str:
        return "—" if v is None else f"${v:.4f}"

    rows = [
        ("conductor", report["conductor"]),
        ("oracle", report["oracle"]),
        (f"best single ({report['best_single']['worker']})", report["best_single"]),
        (f"best of {report['best_of_n']['n']} + judge", report["best_of_n"]),
        ("cheap-first cascade", report["cascade"]),
        *((f"template {k}", v) for k, v in report["templates"].items()),
        ("random workflows", report["random"]),
    ]
    lines = [
        f"{report['data']}: {report['n_test']} prompts it never trained on "
        f"({report['train_rows_skipped']} trained-on rows left out), λ = {report['lambda']:g}",
        f"{'method':<34} {'reward':>7} {'cost':>10} {'parse':>6} {'score':>7}",
    ]
    for name, f in rows:
        parse = f"{f['parse_rate']:.0%}" if "parse_rate" in f else "—"
        score = f"{f['score']:.3f}" if "score" in f else "—"
        lines.append(f"{name:<34} {f['reward']:>7.3f} {money(f.get('cost')):>10} {parse:>6} {score:>7}")
    return "\n".join(lines)
