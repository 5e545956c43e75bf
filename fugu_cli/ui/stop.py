"""Stopping a headless run. The first Ctrl-C asks the turn to stop after the call or command it is in; SIGTERM
or a second Ctrl-C also kills the commands the turn started, so the turn ends at once, still writing its
result and its cut step's ledger row; the run then exits 143 (SIGTERM) or 130 (SIGINT).

Signals reach Python's main thread only, so the turn runs on another (ui/turn.py) and the main thread waits
here. If the turn cannot finish within `GRACE_S` of a forced stop, the caller writes what it knows.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_S = 5.0
_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class GaveUp(Exception):
    """The turn did not finish within GRACE_S of a forced stop."""


class Stopper:
    """What the signals asked for: `code` is the exit code once a signal came (None before)."""

    def __init__(self) -> None:
        self.code: int | None = None
        self._cancel: threading.Event | None = None
        self._done: threading.Event | None = None
        self._forced_at: float | None = None
        self._lock = threading.Lock()

    def attach(self, cancel: threading.Event, done: threading.Event | None = None) -> None:
        """The cancel flag of the turn now running, and the flag it sets when it ends (`wait` wakes then)."""
        with self._lock:
            self._cancel = cancel
            self._done = done
        if self.code is not None:
            cancel.set()

    @contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Handle SIGINT and SIGTERM while the run lasts."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in _CODES}
        # a parent may have started fugu with these signals blocked (the mask is inherited across exec): a
        # process that handles Ctrl-C must also be able to receive it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_CODES))
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                # once stopping, a further Ctrl-C must not cut the result short while the process exits
                signal.signal(sig, signal.SIG_IGN if self.code is not None else handler)

    def _on_signal(self, signum: int, frame: object) -> None:
        first = self.code is None
        self.code = _CODES.get(signal.Signals(signum), 130)
        if signum == signal.SIGINT and first:
            self._cancel_turn()
        else:
            self.force()

    def interrupt(self) -> None:
        """Stop the running turn now (an SDK's interrupt request), killing its commands; the run goes on."""
        self._cancel_turn()
        kill_commands()

    def force(self) -> None:
        if self._forced_at is None:
            self._forced_at = time.monotonic()
        self._cancel_turn()
        kill_commands()

    def wait(self, seconds: float) -> None:
        """TurnThread's wait: until the turn ends or `seconds` pass; gives up on a turn that outlives a forced
        stop by GRACE_S."""
        done = self._done
        if done is None:
            time.sleep(seconds)
        else:
            done.wait(seconds)
        if self._forced_at is not None and time.monotonic() - self._forced_at > GRACE_S:
            raise GaveUp

    def _cancel_turn(self) -> None:
        with self._lock:
            if self._cancel is not None:
                self._cancel.set()


def kill_commands() -> None:
    """Kill the process groups of this process's children that lead their own group: the shell tool starts
    every command that way, and nothing a command started may outlive the stop."""
    from fugu_cli.tools.waiting import children_by_parent  # only when stopping

    me, own_group = os.getpid(), os.getpgrp()
    for pid in children_by_parent().get(me, []):
        try:
            if os.getpgid(pid) == pid != own_group:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
