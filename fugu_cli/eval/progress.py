"""What `fugu eval` shows on stderr while it runs: a line per finished run, and on a terminal a live bar
(runs done of all, solved, failed, running, cost so far) under them. Imports rich only when a bar is shown.
"""

from __future__ import annotations

import sys
import threading
from typing import IO, Any

from fugu_cli.eval.jobs import Job
from fugu_cli.eval.report import RunRecord


def run_line(r: RunRecord) -> str:
    mark = "✓" if r.reward >= 1.0 else ("!" if not r.stored else "✗")
    why = f" ({r.error})" if r.error and not r.stored else ""
    return (
        f"{mark} {r.task} / {r.arm} #{r.repeat + 1}: reward {r.reward:g}, ${r.cost_usd:.4f},"
        f" {r.duration_s:.1f} s{why}"
    )


class EvalProgress:
    """Counts runs as they start and end; prints them to `stream`, with a bar when `console` is given (a rich
    Console on a terminal: `for_stderr` makes one when stderr is a terminal)."""

    def __init__(self, stream: IO[str] | None = None, console: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.console = console
        self.total = self.done = self.solved = self.failed = self.running = 0
        self.cost_usd = 0.0
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None

    @classmethod
    def for_stderr(cls) -> EvalProgress:
        if not sys.stderr.isatty():
            return cls()
        from rich.console import Console

        return cls(console=Console(file=sys.stderr))

    def plan(self, total: int) -> None:
        self.total = total
        if self.console is None:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("eval"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._task = self._bar.add_task("eval", total=total, status=self.status())
        self._bar.start()

    def status(self) -> str:
        counts = f"solved {self.solved} · failed {self.failed} · running {self.running}"
        return f"{counts} · ${self.cost_usd:.4f} so far"

    def started(self, _job: Job) -> None:
        with self._lock:
            self.running += 1
            self._refresh()

    def finished(self, r: RunRecord) -> None:
        with self._lock:
            self.running = max(0, self.running - 1)
            self.done += 1
            self.solved += r.stored and r.reward >= 1.0
            self.failed += not r.stored
            self.cost_usd += r.cost_usd
            if self._bar is not None:
                self._bar.console.print(run_line(r), markup=False, highlight=False)
            else:
                print(run_line(r), file=self.stream, flush=True)
            self._refresh()

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, status=self.status())

    def close(self) -> None:
        if self._bar is not None:
            self._refresh()
            self._bar.stop()
            self._bar = None
