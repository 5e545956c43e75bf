"""A fork server for the tests' `fugu` runs (`tests.helpers.fugu`).

Each run is still a process of its own, with its own stdin, stdout, stderr, working directory, environment,
exit code and interpreter shutdown; what it skips is Python's start and the import of the modules every
`fugu -p` imports (about half a second of CPU), which a process forked from a server that imported them
once already holds. A server (one per test process and preload set, started on first use, ended when that
process ends) imports only what every `fugu -p` run imports, never litellm, ray, MCP or transformers, which
a run still imports itself as a user's would; the one for `fugu router train|eval` also imports torch,
which those import first thing (a server for `fugu conductor`'s transformers, peft and TRL saved nothing
measurable: those tests make few runs each). A server with a thread refuses to start (a fork copies no
threads).

A run whose environment differs from the server's in what is read at start-up (`PYTHON*`, and OpenMP's and
MKL's variables, read as torch loads) runs as a plain `python -m fugu_cli` subprocess instead; so does every
run where FUGU_TEST_FORK=0.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import locale
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# what a `fugu -p` run imports (found from its sys.modules at exit): none of these is heavy
PRELOAD = (
    "fugu_cli.__main__",
    "fugu_cli.cli",
    "fugu_cli.app",
    "fugu_cli.agent",
    "fugu_cli.session",
    "fugu_cli.store",
    "fugu_cli.llm.client",
    "fugu_cli.llm.direct",
    "fugu_cli.tools.registry",
    "fugu_cli.context.repomap",
    "fugu_cli.ui.run",
    "fugu_cli.ui.admin",
)
# and for `fugu router train|eval`, which import torch first thing
PRELOAD_TORCH = (*PRELOAD, "torch", "fugu_cli.router.commands", "fugu_cli.router.eval_command")
_MAIN = str(Path(__file__).resolve().parents[1] / "fugu_cli" / "__main__.py")


# the server side


def serve(path: str, preload: tuple[str, ...]) -> None:
    """Import `preload`, then fork a child per request on the Unix socket at `path` until stdin closes (the
    test process that started this one is gone). Single-threaded: children are reaped on SIGCHLD."""
    from fugu_cli.__main__ import before_imports

    before_imports()  # as `python -m fugu_cli` does first: OpenMP reads its settings when torch loads
    for name in preload:
        importlib.import_module(name)
    # What every run with a fresh FUGU_HOME (each test's) then builds on first use: the config models'
    # validators, which pydantic defers (`fugu_cli/config.py`); built here once, about 0.06 s of CPU a run.
    config = importlib.import_module("fugu_cli.config")
    for model in vars(config).values():
        if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == config.__name__:
            model.model_rebuild()
    if threading.active_count() != 1:  # a fork would copy the memory of threads but not the threads
        print(f"threads: {threading.enumerate()}", flush=True)
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    waiting: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(wake_r, selectors.EVENT_READ, "reap")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            if key.data == "parent" and not os.read(sys.stdin.fileno(), 4096):
                os._exit(0)
            if key.data == "reap":
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            if key.data == "accept":
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    _become(request, fds, [listener, conn, *waiting.values()], (wake_r, wake_w))
                    from fugu_cli.__main__ import main

                    sys.exit(main())  # the interpreter then shuts down as a `python -m fugu_cli` would
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                waiting[pid] = conn
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            gone = waiting.pop(pid, None)
            if gone is not None:
                with contextlib.suppress(OSError):
                    gone.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                gone.close()


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    size = int.from_bytes(data[:8], "big")
    while len(data) < 8 + size:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("the request was cut short")
        data += more
    return json.loads(data[8:]), list(fds)


def _become(
    request: dict[str, Any], fds: list[int], close: list[socket.socket], wake: tuple[int, int]
) -> None:
    """In the forked child: this run's signals, standard streams, directory, environment and argv."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for s in close:
            s.close()
        for fd in wake:
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [_MAIN, *request["args"]]
    except BaseException as e:  # e.g. a folder that is not there: said where the test reads it
        os.write(2, f"fugu fork server: the run could not start: {e!r}\n".encode())
        os._exit(70)


# the test side


class Zygote:
    def __init__(self, preload: tuple[str, ...]) -> None:
        self._dir = tempfile.mkdtemp(prefix="fugu-zygote-", dir="/tmp")
        self.path = os.path.join(self._dir, "s")
        self.startup = _read_at_startup(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from tests.zygote import serve; serve({self.path!r}, {preload!r})"],
            cwd=Path(__file__).resolve().parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        said = self.proc.stdout.readline().strip()
        if said != "ready":
            raise RuntimeError(f"the fork server did not start: {said}")

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self._dir, ignore_errors=True)

    def suits(self, env: dict[str, str]) -> bool:
        """Whether a child of this server starts as `python` would with `env`."""
        return _read_at_startup(env) == self.startup

    def run(
        self, args: list[str], cwd: str, stdin: str, env: dict[str, str], timeout: float
    ) -> tuple[int, str, str]:
        """Like subprocess.run(capture_output=True, text=True, timeout=...): (exit code, stdout, stderr)."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
            body = json.dumps({"args": args, "cwd": cwd, "env": env}).encode()
            socket.send_fds(sock, [len(body).to_bytes(8, "big") + body], [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        out: dict[int, bytes] = {}

        def drain(fd: int) -> None:
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
            out[fd] = b"".join(chunks)
            os.close(fd)

        def feed() -> None:
            with contextlib.suppress(BrokenPipeError), os.fdopen(in_w, "wb") as f:
                f.write(stdin.encode(locale.getpreferredencoding(False)))

        threads = [
            threading.Thread(target=t, args=a, daemon=True)
            for t, a in ((feed, ()), (drain, (out_r,)), (drain, (err_r,)))
        ]
        for t in threads:
            t.start()
        lines = _Lines(sock)
        pid = int(lines.next(None))
        try:
            code = int(lines.next(timeout))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            lines.next(None)
            for t in threads:
                t.join()
            raise subprocess.TimeoutExpired(args, timeout) from None
        finally:
            sock.close()
        for t in threads:
            t.join()
        return code, _text(out[out_r]), _text(out[err_r])


class _Lines:
    """The server's replies on a connection: the child's pid, then its exit code, a line each."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def next(self, timeout: float | None) -> str:
        self.sock.settimeout(timeout)
        while b"\n" not in self.buf:
            chunk = self.sock.recv(64)
            if not chunk:
                raise EOFError("the fork server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()


# what Python reads as it starts, and what OpenMP and MKL read as torch loads: a child forked from a server
# started with other values of these would not run as a fresh process would
_STARTUP_PREFIXES = ("PYTHON", "OMP_", "KMP_", "MKL_")


def _read_at_startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_STARTUP_PREFIXES)}


def _text(data: bytes) -> str:
    """As subprocess's text mode reads it: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


_servers: dict[tuple[str, ...], Zygote] = {}
_table = threading.Lock()  # a test may start runs from several threads at once


@atexit.register
def _stop() -> None:
    """Ends this process's servers (each also ends on its own when this process's end closes its stdin)."""
    for found in _servers.values():
        found.stop()


def server(args: Sequence[str]) -> Zygote | None:
    """The fork server of this test process for `fugu ARGS` (started on first use), or None where
    FUGU_TEST_FORK=0."""
    if os.environ.get("FUGU_TEST_FORK", "1") == "0":
        return None
    heavy = list(args[:1]) == ["router"] and list(args[1:2]) in (["train"], ["eval"])
    preload = PRELOAD_TORCH if heavy else PRELOAD
    with _table:
        found = _servers.get(preload)
        if found is None or found.proc.poll() is not None:
            found = _servers[preload] = Zygote(preload)
    return found
