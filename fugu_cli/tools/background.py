"""Background commands: `shell` with `background: true` starts one and returns its handle at once;
`shell_output` reads what it printed since the last read and `shell_kill` stops it.

`BackgroundShells` is one session's set of them (a service guarding its own state). Each command runs in the
sandbox like any other (its own PID namespace: whatever it starts dies with it), started from a thread that
lives as long as it does (bwrap's die-with-parent follows that thread). Only the newest output is kept
(`RING_BYTES`), and it is redacted before anyone reads it; `close` kills every command: they die with the
session. Never prints.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.base import Invocation, ToolFailed

RING_BYTES = 256 * 1024  # output kept per command; older output is dropped (and said so)
MAX_RUNNING = 8
MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class ShellInfo:
    """A background command as /ps and the tools show it."""

    id: str
    command: str
    pid: int
    running: bool
    exit_code: int | None
    started: float  # wall clock
    output_bytes: int
    sandboxed: bool
    killed: bool

    @property
    def state(self) -> str:
        if self.running:
            return "running"
        return "killed" if self.killed else f"exited with code {self.exit_code}"


class _Job:
    def __init__(self, id: str, command: str) -> None:
        self.id, self.command = id, command
        self.proc: subprocess.Popen[bytes] | None = None
        self.sandboxed = False
        self.error: str | None = None
        self.started = time.time()
        self.buf = bytearray()  # the newest output: bytes [total - len(buf), total)
        self.total = 0
        self.read_to = 0
        self.exit_code: int | None = None
        self.killed = False
        self.ready = threading.Event()
        self.cond = threading.Condition()
        self.thread: threading.Thread | None = None

    def info(self) -> ShellInfo:
        with self.cond:
            return ShellInfo(
                id=self.id,
                command=self.command,
                pid=self.proc.pid if self.proc else 0,
                running=self.exit_code is None,
                exit_code=self.exit_code,
                started=self.started,
                output_bytes=self.total,
                sandboxed=self.sandboxed,
                killed=self.killed,
            )


class BackgroundShells:
    """One session's background commands."""

    def __init__(self, ring_bytes: int = RING_BYTES, max_running: int = MAX_RUNNING) -> None:
        self.ring_bytes, self.max_running = ring_bytes, max_running
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False

    def start(self, command: str, cwd: Path, policy: sb.SandboxPolicy) -> ShellInfo:
        with self._lock:
            if self._closed:
                raise ToolFailed("the session is ending: no new background command can start.")
            running = [j for j in self._jobs.values() if j.exit_code is None]
            if len(running) >= self.max_running:
                ids = ", ".join(j.id for j in running)
                raise ToolFailed(f"{len(running)} background commands are running ({ids}): stop one first.")
            self._count += 1
            job = _Job(f"bg{self._count}", command)
            self._jobs[job.id] = job
        job.thread = threading.Thread(
            target=self._run, args=(job, cwd, policy), name=f"fugu-{job.id}", daemon=True
        )
        job.thread.start()
        job.ready.wait()
        if job.error is not None:
            with self._lock:
                self._jobs.pop(job.id, None)
            raise ToolFailed(f"the command could not start: {job.error}")
        return job.info()

    def _run(self, job: _Job, cwd: Path, policy: sb.SandboxPolicy) -> None:
        """The command's life, on its own thread: start it, keep its newest output, note its exit."""
        try:
            proc, sandboxed = sb.spawn(["bash", "-c", job.command], cwd=cwd, policy=policy)
        except OSError as e:
            job.error = e.strerror or str(e)
            job.ready.set()
            return
        job.proc, job.sandboxed = proc, sandboxed
        job.ready.set()
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with job.cond:
                job.buf += chunk
                job.total += len(chunk)
                if len(job.buf) > self.ring_bytes:
                    del job.buf[: len(job.buf) - self.ring_bytes]
                job.cond.notify_all()
        code = proc.wait()
        proc.stdout.close()
        with job.cond:
            job.exit_code = code
            job.cond.notify_all()

    def _job(self, id: str) -> _Job:
        with self._lock:
            job = self._jobs.get(id.strip())
            known = ", ".join(self._jobs) or "none"
        if job is None:
            raise ToolFailed(f"no background command {id!r} in this session (known: {known}).")
        return job

    def read(self, id: str, wait_s: float = 0.0) -> tuple[str, ShellInfo]:
        """What `id` printed since the last read (waiting up to `wait_s` for something new), and its state."""
        job = self._job(id)
        with job.cond:
            if wait_s > 0 and job.total == job.read_to and job.exit_code is None:
                job.cond.wait(timeout=min(wait_s, MAX_WAIT_S))
            start = max(job.read_to, job.total - len(job.buf))
            dropped = start - job.read_to
            data = bytes(job.buf[len(job.buf) - (job.total - start) :])
            job.read_to = job.total
        text = data.decode("utf-8", errors="replace")
        if dropped:
            text = (
                f"[... {dropped} older bytes dropped: only the newest {self.ring_bytes} are kept ...]\n{text}"
            )
        return text, job.info()

    def kill(self, id: str) -> ShellInfo:
        job = self._job(id)
        self._stop(job)
        return job.info()

    def _stop(self, job: _Job) -> None:
        with job.cond:
            if job.exit_code is not None or job.proc is None:
                return
            job.killed = True
        sb.kill_tree(job.proc)  # returns once the command is dead and reaped
        if job.thread is not None:
            job.thread.join(timeout=5)  # its last output, read to the end
        with job.cond:
            # the reader can still be waiting: on a loaded machine, or on a process that left the command's
            # group and holds its output open; the command itself is dead, and its slot is free
            if job.exit_code is None:
                job.exit_code = job.proc.returncode
                job.cond.notify_all()

    def list(self) -> list[ShellInfo]:
        with self._lock:
            jobs = list(self._jobs.values())
        return [j.info() for j in jobs]

    def close(self) -> None:
        """Kill every background command (the session ends); no new one starts."""
        with self._lock:
            self._closed = True
            jobs = list(self._jobs.values())
        for job in jobs:
            self._stop(job)


# --- the tools ---------------------------------------------------------------------------------------------


def start(inv: Invocation, command: str, policy: sb.SandboxPolicy) -> str:
    """`shell` with `background: true`: start `command` and say how to follow it."""
    shells = inv.ctx.background
    if shells is None:
        raise ToolFailed("background commands are not available here: run it without background.")
    info = shells.start(command, inv.root, policy)
    notes = [
        f"Started in the background as {info.id} (pid {info.pid}). Read its output with "
        f'shell_output(shell_id="{info.id}"), stop it with shell_kill; it runs until then or until the '
        "session ends."
    ]
    if info.sandboxed and not policy.allow_network:
        notes.append(
            "The sandbox gives each command its own network: a server it starts cannot be reached from your "
            "other commands (the user can allow network in [sandbox])."
        )
    notice = sb.take_notice()
    return "\n".join([notice, *notes] if notice else notes)


def shell_output(inv: Invocation, shell_id: str, wait_s: float | None = None) -> str:
    """Read what a background command (started with shell background: true) printed since your last read,
    and whether it is still running.

    Args:
        shell_id: The handle shell returned, e.g. "bg1".
        wait_s: Seconds to wait for new output when there is none yet (default 0, max 30).
    """
    shells = inv.ctx.background
    if shells is None:
        raise ToolFailed("there are no background commands here.")
    text, info = shells.read(shell_id, max(wait_s or 0.0, 0.0))
    head = f"[{info.id}: {info.state}; {info.output_bytes} bytes of output in all]"
    return f"{head}\n{text.rstrip()}" if text.strip() else f"{head}\n[no new output]"


def shell_kill(inv: Invocation, shell_id: str) -> str:
    """Stop a background command (and everything it started).

    Args:
        shell_id: The handle shell returned, e.g. "bg1".
    """
    shells = inv.ctx.background
    if shells is None:
        raise ToolFailed("there are no background commands here.")
    info = shells.kill(shell_id)
    return f"[{info.id}: {info.state}]"
