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
    """Kill the command and everything it started (the sandbox's PID namespace dies with its init).

    The command leads its own process group, which one signal kills; but what it started in a session of its
    own is not in it. bwrap's sandbox is such a child (`--new-session`, pid 1 of its namespace), which dies
    with bwrap through PR_SET_PDEATHSIG, set by the sandbox itself as it starts: a bwrap killed in its first
    milliseconds left its sandbox running for good, the command in it too (seen: pid 1 of its namespace,
    parent 1). So while the command has not ended, it is stopped
    (it can start nothing more) and its descendants are killed first, by process id."""
    if proc.poll() is None:  # not yet reaped: its pid is still its own, and so are its children's
        _signal(proc.pid, signal.SIGSTOP)
        for pid in _descendants(proc.pid):  # stopped, the command can start no more
            _signal(pid, signal.SIGKILL)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def children_by_parent() -> dict[int, list[int]]:
    """Every process's children, by parent pid: from /proc, read once (`ps` where there is no /proc)."""
    out: dict[int, list[int]] = {}
    if not os.path.isdir("/proc"):
        found = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, check=False)
        for line in found.stdout.splitlines():
            child, parent = line.split()
            out.setdefault(int(parent), []).append(int(child))
        return out
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # ended meanwhile
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ")"
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _descendants(root: int) -> list[int]:
    """The processes below `root`, parents before their children."""
    children = children_by_parent()
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


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
