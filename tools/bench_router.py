"""Benchmark: learned-router decision latency with 1, 10 and 50 messages of transcript, and its memory.

"incremental" is the realistic case: the transcript so far is cached and one new message arrived since the
last decision (the task itself for 1 message, else a long tool result cut to the checkpoint's step_tokens).
"cold" encodes the whole transcript window from nothing (a resumed session's first step). "cpu" is the
incremental decision's CPU time over all threads: on a busy machine it says what the wall time would be on an
idle one (between cpu / threads and cpu).
Target (DESIGN.md §10): incremental median ≤ 25 ms on 2 CPU threads with the default backbone, flat in length.

    HF_HUB_OFFLINE=1 PYTHONPATH=. .venv/bin/python tools/bench_router.py [--threads 2] [--repeat 40]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from fugu_cli.types import Message, RouteState, ToolCall, Worker

LENGTHS = (1, 10, 50)
POOL = [
    Worker("opus", "anthropic/claude-opus-4", description="Careful planner for hard refactors and design.",
           price_in=15.0, price_out=75.0),
    Worker("gpt", "openai/gpt-4.1", description="Strong generalist coder, fast with tools.",
           price_in=2.0, price_out=8.0),
    Worker("flash", "gemini/gemini-2.5-flash", description="Cheap and fast: small edits, lookups, shell.",
           price_in=0.3, price_out=2.5),
    Worker("local", "ollama/qwen3:8b", description="Local model for simple, private tasks."),
]  # fmt: skip
CODE = "def load(path):\n    with open(path) as f:\n        return json.load(f)\n" * 12


def message(i: int, salt: str = "") -> Message:
    """The i-th message of a plausible coding session: tool calls, their (long) results, short notes."""
    if i == 0:
        return Message("user", f"Add a --json flag to `fugu pool` and keep the tests green {salt}")
    kind = i % 3
    if kind == 1:
        call = ToolCall(f"c{i}{salt}", "read_file", f'{{"path": "src/mod_{i}.py", "start": {i}}}')
        return Message("assistant", f"Reading module {i} {salt}", tool_calls=(call,), worker="gpt")
    if kind == 2:
        return Message("tool", f"# src/mod_{i}.py {salt}\n{CODE}", tool_call_id=f"c{i - 1}{salt}")
    return Message("assistant", f"Step {i}: the loader ignores missing files; fixing that next. {salt}",
                   worker="gpt")  # fmt: skip


def rss_mb() -> float:
    """Current resident set size (Linux /proc; falls back to the peak from getrusage)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(router: object, state: RouteState, cpu: list[float]) -> float:
    """Wall milliseconds of one decision; appends its CPU milliseconds (all threads) to `cpu`."""
    start, start_cpu = time.perf_counter(), time.process_time()
    router.pick(state, POOL)  # type: ignore[attr-defined]
    cpu.append((time.process_time() - start_cpu) * 1000)
    return (time.perf_counter() - start) * 1000


def p95(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--checkpoint", type=Path, help="a trained checkpoint (default: an untrained one)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Idle OpenMP threads otherwise spin; on a busy 2-core machine that alone makes 2 threads 5-10x slower.
    # It must be set before torch loads: fugu sets it the same way before importing the router.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    import torch  # before the RSS baseline, so it counts torch itself, not the router

    from fugu_cli.router.checkpoint import init_checkpoint
    from fugu_cli.router.learned import LearnedRouter

    base = rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint or Path(tmp) / "ckpt"
        if args.checkpoint is None:
            init_checkpoint(ckpt, POOL[:3], backbone=args.backbone)
        start = time.perf_counter()
        router = LearnedRouter.load(ckpt, threads=args.threads, cost_weight=0.5)
        load_s = time.perf_counter() - start
    loaded = rss_mb()

    print(f"backbone {args.backbone}, {torch.get_num_threads()} threads, load {load_s:.2f} s, "
          f"{args.repeat} decisions per row, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")  # fmt: skip
    for i in range(10):  # first shapes pay for kernel set-up; a session has paid it before its tenth step
        router.pick(RouteState([message(j, f"warm{i}") for j in range(i + 1)], step=i), POOL)
    print(f"{'messages':>8}  {'incremental median':>18}  {'p95':>7}  {'cpu':>7}  "
          f"{'cold median':>11}  {'p95':>7}")  # fmt: skip
    for n in LENGTHS:
        prefix = [message(i) for i in range(n - 1)] if n > 1 else []
        inc: list[float] = []
        cold: list[float] = []
        cpu: list[float] = []
        cold_cpu: list[float] = []
        for r in range(args.repeat):
            salt = f"#{n}.{r}"
            new = message(2 if n > 1 else 0, salt)
            router.encoder.clear()
            cold.append(timed(router, RouteState([*prefix, new], step=n, last_worker="gpt"), cold_cpu))
            router.encoder.clear()
            router.pick(RouteState(prefix or [message(0)], step=n, last_worker="gpt"), POOL)  # cache the past
            new = message(2 if n > 1 else 0, salt + "'")
            inc.append(timed(router, RouteState([*prefix, new], step=n, last_worker="gpt"), cpu))
        print(f"{n:>8}  {statistics.median(inc):>15.1f} ms  {p95(inc):>4.1f} ms  "
              f"{statistics.median(cpu):>4.1f} ms  "
              f"{statistics.median(cold):>8.1f} ms  {p95(cold):>4.1f} ms")  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"resident memory: {loaded - base:.0f} MB for the router (backbone + head + caches) on top of "
          f"{base:.0f} MB for Python and torch; now {rss_mb():.0f} MB, peak {peak:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
