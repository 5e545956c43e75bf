"""What `fugu eval` shows while it runs: a line per run, and on a terminal a bar with runs done, solved,
failed, running and the cost so far (rendered by rich to a fixed-width console)."""

from __future__ import annotations

import io

from rich.console import Console

from fugu_cli.eval.progress import EvalProgress
from fugu_cli.eval.report import RunRecord


def record(task: str, reward: float, cost: float, stored: bool = True) -> RunRecord:
    error = None if stored else "crashed: RuntimeError: boom"
    return RunRecord(task, "w", 0, "success", reward, cost, None, 0, False, "", error, 1.5, stored)


def test_the_bar_counts_runs_and_cost_as_they_end() -> None:
    out = io.StringIO()
    progress = EvalProgress(console=Console(file=out, force_terminal=True, width=120, color_system=None))
    progress.plan(3)
    for _ in range(3):
        progress.started(None)  # type: ignore[arg-type]
    assert progress.status() == "solved 0 · failed 0 · running 3 · $0.0000 so far"
    progress.finished(record("a", 1.0, 0.0125))
    progress.finished(record("b", 0.0, 0.0, stored=False))
    assert progress.status() == "solved 1 · failed 1 · running 1 · $0.0125 so far"
    progress.finished(record("c", 0.0, 0.5))
    progress.close()
    text = out.getvalue()
    assert "✓ a / w #1: reward 1, $0.0125, 1.5 s" in text and "! b / w #1" in text and "boom" in text
    assert "3/3" in text and "solved 1 · failed 1 · running 0 · $0.5125 so far" in text


def test_without_a_terminal_each_run_is_one_plain_line() -> None:
    out = io.StringIO()
    progress = EvalProgress(stream=out)
    progress.plan(1)
    progress.finished(record("a", 0.0, 0.25))
    progress.close()
    assert out.getvalue() == "✗ a / w #1: reward 0, $0.2500, 1.5 s\n"
