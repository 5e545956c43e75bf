"""Measure what the sandbox costs per command: `bash -c true` through the shell tool, sandboxed and not.

Median (and p90) over N calls each, in a temp git repo with a commit, through the real ToolRegistry, plus the
bare `sandbox.run` without the tool around it: in the repository (its git directories get gitguard's
stand-in), in a plain folder (no git directory: the same sandbox without the stand-in) and read-only (no
stand-in either). Each figure is also given as a ratio to the floor, a bare `subprocess.run` of the same
command, measured in the same run. The cases take turns in rounds, so a change in the machine's load
falls on all of them alike. Not a test.

    .venv/bin/python tools/bench_sandbox.py [--calls 60] [--rounds 4]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
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

FLOOR = "subprocess.run bash -c true (floor)"


def _repo(path: Path) -> Path:
    path.mkdir()
    (path / "README.md").write_text("# bench\n")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)  # the bench's own fixture, not fugu's git
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    who = ["-c", "user.name=b", "-c", "user.email=b@x"]
    subprocess.run(["git", *who, "commit", "-qm", "init"], cwd=path, check=True)
    return path


def cases(repo: Path, plain: Path) -> dict[str, Callable[[], object]]:
    registry = ToolRegistry.default()
    call = ToolCall("c", "shell", json.dumps({"command": "true"}))
    out: dict[str, Callable[[], object]] = {}
    for mode in ("off", "workspace-write", "read-only"):
        policy = sb.SandboxPolicy(mode=mode)  # type: ignore[arg-type]
        ctx = ToolContext(root=repo, agent="b", policy=PermissionPolicy(mode="full-auto"), sandbox=policy)
        out[f"shell tool, sandbox {mode}"] = functools.partial(registry.run, call, ctx)
    argv = ["bash", "-c", "true"]
    for where, folder, mode in (
        ("repo", repo, "off"),
        ("repo", repo, "workspace-write"),
        ("plain folder", plain, "workspace-write"),
        ("repo", repo, "read-only"),
    ):
        policy = sb.SandboxPolicy(mode=mode)  # type: ignore[arg-type]
        out[f"sandbox.run, {where}, {mode}"] = functools.partial(sb.run, argv, cwd=folder, policy=policy)
    out[FLOOR] = lambda: subprocess.run(argv, cwd=repo)
    return out


def measure(todo: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict[str, list[float]]:
    for fn in todo.values():
        fn()  # warm: the bwrap probe, the imports and the stand-in's skeleton happen once
    times: dict[str, list[float]] = {name: [] for name in todo}
    per_round = max(calls // rounds, 1)
    for _ in range(rounds):
        for name, fn in todo.items():
            for _ in range(per_round):
                t = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    print(f"bwrap: {sb.bwrap_binary()}  ({sb.unavailable_reason() or 'works'})")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        repo, plain = _repo(Path(tmp) / "repo"), Path(tmp) / "plain"
        plain.mkdir()
        times = measure(cases(repo, plain), args.calls, args.rounds)
    floor = statistics.median(times[FLOOR])
    print(f"{'what':<46}{'median ms':>10}{'p90 ms':>9}{'x floor':>9}")
    for name, ts in times.items():
        ts.sort()
        med, p90 = statistics.median(ts), ts[max(int(len(ts) * 0.9) - 1, 0)]
        print(f"{name:<46}{med:>10.1f}{p90:>9.1f}{med / floor:>9.1f}")
    print(
        f"{len(times[FLOOR])} calls each in {args.rounds} rounds; load average {load[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
