"""`fugu router train`'s progress bar: the phase, a bar, what it has done of what, the time since the run
began and the time this phase still needs at its pace so far. One line redrawn in place on a terminal;
elsewhere a plain line at each tenth of a phase. Writes to a `write` callable (stderr by default).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

WIDTH = 20


def _stderr(text: str, end: str) -> None:
    print(text, end=end, file=sys.stderr, flush=True)


def clock(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class TrainBar:
    """`[████████            ] choosing α, τ 6/15 · 1m12s elapsed · about 1m48s left in this phase`."""

    def __init__(
        self,
        *,
        tty: bool,
        write: Callable[[str, str], None] = _stderr,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tty = tty
        self.write = write
        self.now = now
        self.began = now()
        self._phase = ""
        self._phase_began = self.began
        self._last = self.began  # the last update or ended line: where a new phase's time begins
        self._shown = -1  # the tenth of the phase last written (not on a terminal)
        self._open = False  # a line is drawn and not yet ended

    def update(self, phase: str, done: int, total: int, detail: str = "") -> None:
        if phase != self._phase:
            began = self._last
            self.end()
            self._phase, self._phase_began, self._shown = phase, began, -1
        line = self.line(phase, done, total, detail)
        self._last = self.now()
        if self.tty:
            self.write("\r" + line + "\x1b[K", "")
            self._open = True
            if done >= total:
                self.end()
        else:
            tenth = 10 * done // max(total, 1)
            if tenth != self._shown:
                self._shown = tenth
                self.write(line, "\n")

    def line(self, phase: str, done: int, total: int, detail: str = "") -> str:
        frac = min(1.0, done / total) if total > 0 else 1.0
        bar = "█" * int(WIDTH * frac)
        now = self.now()
        spent = now - self._phase_began
        if done >= total:
            left = "done"
        elif done > 0 and spent > 0:
            left = f"about {clock(spent / done * (total - done))} left in this phase"
        else:
            left = "time left: measuring"
        extra = f" · {detail}" if detail else ""
        return f"[{bar:<{WIDTH}}] {phase} {done}/{total}{extra} · {clock(now - self.began)} elapsed · {left}"

    def end(self) -> None:
        """End a line drawn in place (before anything else is printed)."""
        self._last = self.now()
        if self._open:
            self.write("", "\n")
            self._open = False
