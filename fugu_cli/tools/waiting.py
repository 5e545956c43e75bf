"""Waiting for a command the sandbox started: feeding its stdin, reading its pipes until it ends, the timeout
and the turn's cancel, and killing all it started. Knows nothing of bwrap or policies.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Literal


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command and everything it started (the sandbox's PID namespace dies with its init)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def wait(
    proc: subprocess.Popen[bytes],
    input: bytes | None,
    timeout: float | None,
    cancel: threading.Event | None,
    on_out: Callable[[bytes], None],
    on_err: Callable[[bytes], None],
) -> Literal["timeout", "cancel", ""]:
    """Feed, read and wait for the command; whatever happens, kill all it started before returning."""
    feeder = _feed(proc, input) if input is not None else None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        return _pump(proc, deadline, cancel, on_out, on_err)
    finally:
        # also on KeyboardInterrupt: nothing the command started may outlive the call
        kill_tree(proc)
        for pipe in (proc.stdout, proc.stderr, proc.stdin):
            if pipe is not None:
                pipe.close()
        if feeder is not None:
            feeder.join(timeout=1)


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> threading.Thread:
    def write() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    thread = threading.Thread(target=write, daemon=True, name="fugu-stdin")
    thread.start()
    return thread


_DRAIN_S = 0.5


def _pump(
    proc: subprocess.Popen[bytes],
    deadline: float | None,
    cancel: threading.Event | None,
    on_out: Callable[[bytes], None],
    on_err: Callable[[bytes], None],
) -> Literal["timeout", "cancel", ""]:
    """Read the command's pipes until it exits and they close; say why it was cut short, if it was.

    The exit is watched through a pidfd where Linux has one, so a short command costs no polling delay.
    """
    exit_fd = _pidfd(proc.pid)
    with selectors.DefaultSelector() as sel:
        open_pipes = 0
        for pipe, sink in ((proc.stdout, on_out), (proc.stderr, on_err)):
            if pipe is not None:
                sel.register(pipe, selectors.EVENT_READ, sink)
                open_pipes += 1
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ, None)
        exited_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    return "cancel"
                if deadline is not None and now >= deadline:
                    return "timeout"
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if open_pipes == 0 and exited_at is not None:
                    return ""
                if exited_at is not None and now - exited_at > _DRAIN_S:
                    return ""  # an unsandboxed background child still holds the pipe; the caller kills it
                if not sel.get_map():
                    time.sleep(0.01)  # no pidfd and the pipes are closed: wait for the exit
                    continue
                for key, _ in sel.select(timeout=0.05):
                    if key.data is None:  # the pidfd: the process has exited
                        sel.unregister(key.fileobj)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        key.data(chunk)
                    else:
                        sel.unregister(key.fileobj)
                        open_pipes -= 1
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
