"""MCP servers through fugu's own `McpManager`, as a session uses them: the third-party `mcp-server-time` and
the tests' `notes_server.py` (the SDK's MCPServer) over stdio (spawned in fugu's sandbox), and the same notes
server over streamable HTTP on loopback. Reports, per server, the median of N runs of: start (spawn,
initialize, list tools, prompts and resources), the first tool call, the next call, and close.

Run: `.venv/bin/python tools/bench_mcp.py [--runs 5]` (a benchmark, not a test; needs the dev dependency
mcp-server-time in the same environment).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent
NOTES = str(ROOT / "tests" / "mcp" / "notes_server.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the HTTP notes server did not start") from None
            time.sleep(0.05)


def _measure(repo: Path, raw: dict[str, Any], tool: str, args: dict[str, Any], runs: int) -> dict[str, float]:
    from fugu_cli.config import load_config
    from fugu_cli.extension_config import load_extensions
    from fugu_cli.mcp import McpManager
    from fugu_cli.tools.sandbox import policy_from_config

    config = load_config(repo)
    phases: dict[str, list[float]] = {"start": [], "first call": [], "next call": [], "close": []}
    for _ in range(runs):
        servers = load_extensions(config, repo, extra_servers={"s": raw}, strict=True).servers
        manager = McpManager(servers, repo, policy_from_config(config.sandbox), Path(tempfile.mkdtemp()))
        t0 = time.perf_counter()
        status = manager.probe()
        t1 = time.perf_counter()
        if status[0].state != "running":
            raise SystemExit(f"{raw}: {status[0].error}")
        manager.call_tool("s", tool, args)
        t2 = time.perf_counter()
        manager.call_tool("s", tool, args)
        t3 = time.perf_counter()
        manager.close()
        t4 = time.perf_counter()
        for key, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases[key].append(seconds * 1000)
    return {key: statistics.median(ms) for key, ms in phases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    os.environ["FUGU_HOME"] = tempfile.mkdtemp(prefix="fugu-bench-mcp-")
    repo = Path(tempfile.mkdtemp(prefix="fugu-bench-mcp-repo-"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    port = _free_port()
    http = subprocess.Popen(
        [sys.executable, NOTES, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_for(port, http)
        time_server = {"command": str(BIN / "mcp-server-time")}
        notes_stdio = {"command": sys.executable, "args": [NOTES]}
        notes_http = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
        cases: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {
            "mcp-server-time, stdio": (time_server, "get_current_time", {"timezone": "UTC"}),
            "notes (MCPServer), stdio": (notes_stdio, "add", {"a": 1, "b": 2}),
            "notes (MCPServer), HTTP": (notes_http, "add", {"a": 1, "b": 2}),
        }
        print(f"median of {runs} runs, ms")
        print(f"{'server':28} {'start':>7} {'first call':>11} {'next call':>10} {'close':>7}")
        for label, (raw, tool, args) in cases.items():
            m = _measure(repo, raw, tool, args, runs)
            figures = f"{m['start']:7.0f} {m['first call']:11.0f} {m['next call']:10.0f} {m['close']:7.0f}"
            print(f"{label:28} {figures}")
    finally:
        http.terminate()
        http.wait(timeout=10)


if __name__ == "__main__":
    main()
