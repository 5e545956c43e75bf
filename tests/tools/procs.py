"""Finding processes by a token in their command line, on the host, whatever PID namespace they run in."""

from __future__ import annotations

import time
import uuid
from pathlib import Path


def token() -> str:
    """A unique `sleep` duration, so a test can find exactly the processes it started: `sleep 1000.<n>`."""
    return f"1000.{uuid.uuid4().int % 10**9}"


def running(marker: str) -> list[int]:
    """Host PIDs of live (not zombie) processes whose command line contains `marker`."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X") and "pytest" not in cmdline:
            pids.append(int(entry.name))
    return pids


def gone_within(marker: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not running(marker):
            return True
        time.sleep(0.05)
    return not running(marker)
