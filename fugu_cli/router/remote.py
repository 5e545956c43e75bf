"""A learned router in a process of its own, for one-shot runs: started as soon as the run knows it needs a
learned router, it imports torch and loads the checkpoint (most of a second) on another core while this
process builds the session, the repo map and the first request; its decisions then cross a pipe, which
carries only the messages that are new since the last decision.

This half (`RouterProcess`) imports no torch. The child half (`serve`, `python -m fugu_cli.router.remote`) is
an ordinary `LearnedRouter`, so decisions are the ones it makes in-process; it ends when the pipe closes, and
ignores the terminal's signals (the run that started it handles those). What the child writes on stderr (a
traceback) goes to fugu's log, and its last words to the error when it stops. Never prints.
"""

from __future__ import annotations

import atexit
import collections
import json
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from fugu_cli.types import Evidence, Message, RouteDecision, RouteState, Stop, Worker

_HEADER = struct.Struct("!I")
log = logging.getLogger("fugu")


class RouterFailed(RuntimeError):
    """The router process could not load or answer (the session falls back to the prior)."""


class RouterProcess:
    """`Router` backed by a child process running `LearnedRouter.load(checkpoint)`."""

    def __init__(self, checkpoint: Path, cost_weight: float | None) -> None:
        self.name = f"learned:{checkpoint.name}"
        meta = json.loads((checkpoint / "router.json").read_text())
        self.has_roles = bool(meta.get("roles"))
        self._lock = threading.Lock()
        self._sent: list[Message] = []  # the transcript the child holds
        self._pool: tuple[Worker, ...] | None = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "fugu_cli.router.remote", str(checkpoint), json.dumps(cost_weight)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the terminal's Ctrl-C is for this process, not the router's
            env={**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")},
        )
        self._said: collections.deque[str] = collections.deque(maxlen=3)  # its last lines on stderr
        threading.Thread(target=self._pump, name="router-stderr", daemon=True).start()
        atexit.register(self.close)

    def _pump(self) -> None:
        """The child's stderr, a line at a time, into the log (whose filter redacts it)."""
        assert self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._said.append(line)
                log.info("router process: %s", line)

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        decision: RouteDecision = self._ask("pick", state, pool)
        return decision

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        answer: RouteDecision | Stop = self._ask("escalate", state, pool)
        return answer

    def _ask(self, op: str, state: RouteState, pool: Sequence[Worker]) -> Any:
        messages = list(state.messages)
        with self._lock:
            keep, limit = 0, min(len(self._sent), len(messages))
            while keep < limit and self._sent[keep] is messages[keep]:
                keep += 1
            workers = tuple(pool)
            request = {
                "op": op,
                "keep": keep,
                "new": messages[keep:],
                "pool": workers if workers != self._pool else None,
                "step": state.step,
                "last_worker": state.last_worker,
                "excluded": state.excluded,
                "failover": state.failover,
                "masked": dict(state.masked),
                "evidence": state.evidence,
            }
            try:
                _send(self._stdin(), request)
                kind, value = _receive(self._stdout())
            except (OSError, EOFError, pickle.PickleError) as e:
                self._sent, self._pool = [], None
                raise RouterFailed(
                    f"the router process stopped ({e or type(e).__name__}){self._last_words()}"
                ) from e
            self._sent, self._pool = messages, workers
        if kind == "lookup":
            raise LookupError(value)
        if kind != "ok":
            self._sent, self._pool = [], None  # the child may not have taken the messages: resend them
            raise RouterFailed(str(value))
        return value

    def _last_words(self) -> str:
        try:
            self._proc.wait(timeout=1)  # its stderr is read to the end once it has exited
        except subprocess.TimeoutExpired:
            pass
        said = list(self._said)
        return f"; it said: {said[-1]}" if said else ""

    def close(self) -> None:
        """Close the pipe; the child exits on its own (killed if it has not within five seconds: on a loaded
        machine tearing torch down takes more than two)."""
        with self._lock:
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None and not stream.closed:
                    try:
                        stream.close()
                    except OSError:  # unsent bytes to a child that is gone
                        pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def _stdin(self) -> IO[bytes]:
        assert self._proc.stdin is not None
        return self._proc.stdin

    def _stdout(self) -> IO[bytes]:
        assert self._proc.stdout is not None
        return self._proc.stdout


def _send(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError("the pipe closed")
    size = _HEADER.unpack(head)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the pipe closed mid-message")
    return pickle.loads(data)  # our own child's bytes, over our own pipe


def serve(checkpoint: Path, cost_weight: float | None, inbox: IO[bytes], outbox: IO[bytes]) -> None:
    """The child's loop: load the router, answer decisions until the pipe closes."""
    try:
        from fugu_cli.router.learned import LearnedRouter

        router: Any = LearnedRouter.load(checkpoint, cost_weight=cost_weight)
        router.backbone.encode(["warm up"])  # the first forward sets up kernels: not on the first step
        failure = None
    except Exception as e:
        traceback.print_exc()  # to the parent's log
        router, failure = None, f"cannot load router checkpoint {checkpoint}: {e}"
    messages: list[Message] = []
    pool: tuple[Worker, ...] = ()
    while True:
        try:
            request = _receive(inbox)
        except EOFError:
            return
        if failure is not None:
            _send(outbox, ("error", failure))
            continue
        messages = messages[: request["keep"]] + list(request["new"])
        pool = request["pool"] if request["pool"] is not None else pool
        state = RouteState(
            messages=tuple(messages),
            step=request["step"],
            last_worker=request["last_worker"],
            excluded=request["excluded"],
            failover=request["failover"],
            masked=request["masked"],
            evidence=request.get("evidence", Evidence()),
        )
        try:
            ask = router.escalate if request.get("op") == "escalate" else router.pick
            reply: tuple[str, Any] = ("ok", ask(state, pool))
        except LookupError as e:
            reply = ("lookup", str(e))
        except Exception as e:
            traceback.print_exc()  # a bug in the router: its traceback goes to the parent's log
            reply = ("error", f"{type(e).__name__}: {e}")
        _send(outbox, reply)


def main(argv: Sequence[str]) -> int:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(Path(argv[0]), json.loads(argv[1]), sys.stdin.buffer, sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
