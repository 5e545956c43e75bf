"""An MCP server's stderr, pumped: the server writes into a pipe; a thread reads it a line at a time, blanks
every secret (fugu_cli.redact: the server's own secret-named env values are registered as secrets when
its config is read), and appends the line to `FUGU_HOME/logs/mcp-NAME.log`, which is capped in size (the
older part moves to `mcp-NAME.log.1`). The last few lines are kept, redacted, for the message shown when the
server stops or cannot start (bwrap's "execvp ...: No such file", a traceback's end, node's error and
version).

Never prints.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO

from fugu_cli.redact import redact

log = logging.getLogger("fugu")
MARK = "--- started by fugu at"
CAP_BYTES = 1_000_000
KEPT_LINES = 5


class StderrLog:
    """One server start's stderr. `writer()` is what the server's stderr is set to; the pump ends when the
    server (and every process holding the pipe) has closed it."""

    def __init__(self, path: Path, cap_bytes: int = CAP_BYTES) -> None:
        self.path = path
        self.cap_bytes = cap_bytes
        self._last: deque[str] = deque(maxlen=KEPT_LINES)
        self._done = threading.Event()
        self._write_end: IO[bytes] | None = None

    def writer(self) -> IO[bytes]:
        """The pipe's write end, for the server's stderr; its copy here is closed once the server started."""
        read, write = os.pipe()
        self._write_end = os.fdopen(write, "wb")
        reader = os.fdopen(read, "rb")
        threading.Thread(target=self._pump, args=(reader,), name="mcp-stderr", daemon=True).start()
        return self._write_end

    def last_line(self, wait_s: float = 0.0) -> str:
        """The server's last words (redacted), after waiting up to `wait_s` for its stderr to end."""
        lines = self.last_lines(wait_s)
        return lines[-1] if lines else ""

    def last_lines(self, wait_s: float = 0.0) -> list[str]:
        """Its last few non-blank lines (redacted, each cut to 300 characters), after waiting up to `wait_s`
        for its stderr to end."""
        self._done.wait(wait_s)
        return list(self._last)

    def close(self) -> None:
        """Close this side's copy of the write end (the server may still hold its own)."""
        if self._write_end is not None and not self._write_end.closed:
            self._write_end.close()

    def _pump(self, reader: IO[bytes]) -> None:
        try:
            out = self._open()
            with reader:
                for raw in reader:
                    line = redact(raw.decode("utf-8", "replace").rstrip("\r\n"))
                    if line.strip():
                        self._last.append(line.strip()[:300])
                    if out is not None:
                        out = self._append(out, line)
            if out is not None:
                out.close()
        except OSError:
            log.warning("an MCP server's stderr could not be kept in %s", self.path, exc_info=True)
        finally:
            self._done.set()

    def _open(self) -> IO[str] | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            out = self.path.open("a", encoding="utf-8")
        except OSError:
            log.warning("cannot write %s", self.path, exc_info=True)
            return None
        out.write(f"{MARK} {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        out.flush()
        return out

    def _append(self, out: IO[str], line: str) -> IO[str] | None:
        if out.tell() + len(line) + 1 > self.cap_bytes:  # keep the newest part: rotate to `.1`
            out.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            reopened = self._open()
            if reopened is None:
                return None
            out = reopened
        out.write(line + "\n")
        out.flush()
        return out
