"""Benchmark: wall time of a three-parallel-steps-plus-merge workflow against its steps' times.

Four loopback provider servers answer with a fixed delay per call; each step makes two calls (a tool call,
then its answer). The workflow runs in process through app.build_session and the real litellm client, with git
worktrees in a temporary repository. Target (DESIGN.md §10): wall ≤ 1.2 × (max of parallel steps + merge).

    PYTHONPATH=. .venv/bin/python tools/bench_ultra.py [--delay 0.5] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from fugu_cli.app import RunOptions, build_session
from fugu_cli.events import Event, WorkflowStepFinished
from tests.helpers import make_repo, write_pool
from tests.loopback import LoopbackServer

NAMES = ["alpha", "beta", "gamma", "delta"]


def script(servers: dict[str, LoopbackServer], delay: float) -> None:
    for name, server in servers.items():
        read = {"name": "read_file", "arguments": {"path": "calc.py"}}
        server.script(
            name, [{"delay_s": delay, "tool_calls": [read]}, {"delay_s": delay, "content": f"{name} done"}]
        )


def one_run(tmp: Path, servers: dict[str, LoopbackServer], delay: float, n: int) -> dict[str, float]:
    repo = make_repo(tmp / f"repo{n}")
    plan = tmp / "plan.json"
    steps: list[dict[str, object]] = [
        {"worker": w, "subtask": f"part {i}", "access": []} for i, w in enumerate(NAMES[:3])
    ]
    steps.append({"worker": "delta", "subtask": "merge", "access": [0, 1, 2]})
    plan.write_text(json.dumps({"steps": steps}))
    opts = RunOptions(
        cwd=repo, pool=str(tmp / "pool.toml"), permission_mode="full-auto", ultra=True, plan=plan
    )
    session = build_session(opts)
    script(servers, delay)
    finished: dict[int, float] = {}

    def on_event(event: Event) -> None:
        if isinstance(event, WorkflowStepFinished) and event.parent_step is None:
            finished[event.step] = event.elapsed_s

    start = time.perf_counter()
    result = session.run_turn("bench", on_event)
    wall = time.perf_counter() - start
    assert result.status == "success", result.error
    parallel = [finished[i] for i in range(3)]
    return {
        "wall": wall,
        "sum": sum(finished.values()),
        "max_plus_merge": max(parallel) + finished[3],
        "merge": finished[3],
        "max_parallel": max(parallel),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.5, help="seconds each LLM call takes")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fugu-bench-") as tmp_s:
        tmp = Path(tmp_s)
        os.environ["FUGU_HOME"] = str(tmp / "home")
        servers = {n: LoopbackServer().start() for n in NAMES}
        workers = [
            {"name": n, "model": f"openai/{n}", "api_base": s.base_url, "price_in": 1.0, "price_out": 2.0}
            for n, s in servers.items()
        ]
        write_pool(tmp / "pool.toml", workers)
        from fugu_cli.llm.client import load_litellm

        load_litellm()  # import once, outside the timing
        one_run(tmp, servers, 0.0, 0)  # warm-up: git, sqlite, litellm's first request
        runs = [one_run(tmp, servers, args.delay, n + 1) for n in range(args.runs)]
        for s in servers.values():
            s.stop()
    wall = statistics.median(r["wall"] for r in runs)
    total = statistics.median(r["sum"] for r in runs)
    ideal = statistics.median(r["max_plus_merge"] for r in runs)
    print(f"delay per LLM call {args.delay:.2f} s, 2 calls per step, {args.runs} runs (medians)")
    print(f"  wall time              {wall:6.2f} s")
    print(f"  sum of step times      {total:6.2f} s   (sequential would take about this)")
    print(f"  max(parallel) + merge  {ideal:6.2f} s")
    ratio = wall / ideal
    print(f"  wall / (max + merge)   {ratio:6.2f}    target ≤ 1.20: {'met' if ratio <= 1.2 else 'MISSED'}")
    print(f"  wall / sum             {wall / total:6.2f}")
    floor = 4 * args.delay  # two calls in the slowest parallel step, two in the merge: no overhead at all
    print(f"  wall / fixed delays    {wall / floor:6.2f}    (max + merge of the delays alone: {floor:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
