"""Measure what the sandbox costs per command: `bash -c true` through the shell tool, sandboxed and not.

Median (and p90) over N calls each, in a temp git repo, through the real ToolRegistry, plus the bare
`sandbox.run` without the tool around it. Not a test.

    .venv/bin/python tools/bench_sandbox.py [--calls 50]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import ToolCall


def timed(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    fn()  # warm: the bwrap probe and the imports happen once
    times: list[float] = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    print(f"bwrap: {sb.bwrap_binary()}  ({sb.unavailable_reason() or 'works'})")
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        registry = ToolRegistry.default()
        call = ToolCall("c", "shell", json.dumps({"command": "true"}))
        print(f"{'what':<42}{'median ms':>10}{'p90 ms':>9}")
        for mode in ("off", "workspace-write", "read-only"):
            policy = sb.SandboxPolicy(mode=mode)  # type: ignore[arg-type]
            ctx = ToolContext(root=repo, agent="b", policy=PermissionPolicy(mode="full-auto"), sandbox=policy)
            med, p90 = timed(functools.partial(registry.run, call, ctx), args.calls)
            print(f"{'shell tool, sandbox ' + mode:<42}{med:>10.1f}{p90:>9.1f}")
        for mode in ("off", "workspace-write"):
            policy = sb.SandboxPolicy(mode=mode)  # type: ignore[arg-type]
            med, p90 = timed(
                functools.partial(sb.run, ["bash", "-c", "true"], cwd=repo, policy=policy), args.calls
            )
            print(f"{'sandbox.run bash -c true, ' + mode:<42}{med:>10.1f}{p90:>9.1f}")
        med, p90 = timed(lambda: subprocess.run(["bash", "-c", "true"], cwd=repo), args.calls)
        print(f"{'subprocess.run bash -c true (reference)':<42}{med:>10.1f}{p90:>9.1f}")


if __name__ == "__main__":
    main()
