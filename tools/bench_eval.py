"""Benchmark: `fugu eval` and the router's embedding pass, here (threads, one process) and on a local Ray
instance, on this machine.

The suite has 64 jobs (32 tasks × 2 workers, each a fresh git repo, a full-auto session and a check) against
loopback workers that answer every call after a fixed delay: `fixer` makes two calls (a write, then "fixed"),
`talker` one. The embedding pass encodes N synthetic prompts with the default backbone (MiniLM), uncached.
Every figure is the median of `--repeat` runs. Ray runs share one instance (`--cpus` CPUs, started once; its
start is reported apart); its first eval run and first embedding pass are reported apart too (cold: worker
processes start, import fugu and load the backbone inside the measured time, as in a first real run).

    .venv/bin/python tools/bench_eval.py [--delay 0.5] [--cpus 2] [--prompts 2000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from fugu_cli.app import RunOptions
from fugu_cli.eval import load_suite, run_suite
from fugu_cli.store import Store
from tests.eval.kit import Responder, write_responder_pool
from tests.helpers import BUGGY, TEST

TASKS = 32


class Slow(Responder):
    """The test responder, every reply after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        return {**super().next_reply(model, body), "delay_s": self.delay}


def write_suite(root: Path) -> Path:
    root.mkdir(parents=True)
    lines = ['name = "bench"']
    for i in range(TASKS):
        lines += [
            "[[tasks]]",
            f'id = "t{i}"',
            f'prompt = "Task {i}: fix calc.py so that python3 test_calc.py passes."',
            'check = "python3 test_calc.py"',
            'protected = ["test_calc.py"]',
            f'files = {{ "calc.py" = {json.dumps(BUGGY)}, "test_calc.py" = {json.dumps(TEST)} }}',
            "",
        ]
    (root / "suite.toml").write_text("\n".join(lines))
    return root


def eval_run(
    tmp: Path, name: str, delay: float, executor: str, parallel: int | None, per_job: float
) -> float:
    home = tmp / f"home-{name}"
    home.mkdir()
    os.environ["FUGU_HOME"] = str(home)
    (home / "config.toml").write_text(f"[executor]\ncpus_per_job = {per_job}\n")
    with Slow(delay) as server:
        pool = write_responder_pool(tmp / f"pool-{name}.toml", server)
        suite = load_suite(tmp / "suite")
        store = Store(home / "fugu.db")
        start = time.perf_counter()
        report = run_suite(
            suite,
            RunOptions(cwd=tmp, pool=str(pool)),
            workers=["fixer", "talker"],
            parallel=parallel,
            store=store,
            executor=executor,
        )
        wall = time.perf_counter() - start
    solved = sum(r.reward for r in report.records)
    stored = store.query("SELECT COUNT(*) AS n FROM outcomes")[0]["n"]
    assert len(report.records) == 2 * TASKS and solved == TASKS and stored == 2 * TASKS, (solved, stored)
    return wall


def embed_run(tmp: Path, name: str, texts: list[str], executor: Any, threads: int) -> float:
    import torch

    from fugu_cli.router.backbone import load_backbone
    from fugu_cli.router.embed_cache import encode_prompts

    torch.set_num_threads(threads)
    backbone = load_backbone("minilm", threads=threads)
    start = time.perf_counter()
    encode_prompts(backbone, texts, cache_dir=tmp / f"cache-{name}", executor=executor)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--delay", type=float, default=0.5, help="seconds before every loopback reply")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--prompts", type=int, default=2000, help="prompts in the embedding pass")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each warm figure (the median is reported)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import ray

    from fugu_cli.cluster import ClusterSpec
    from fugu_cli.router.executor import LocalExecutor, RayExecutor

    load = os.getloadavg()  # other work on this machine skews every figure: say how busy it was
    tmp = Path(tempfile.mkdtemp(prefix="fugu-bench-eval-", dir="/tmp"))
    write_suite(tmp / "suite")
    runs: dict[str, list[float]] = {}
    n = 0

    def measure(key: str, times: int, fn: Any, *fn_args: Any) -> None:
        nonlocal n
        for _ in range(times):
            n += 1
            runs.setdefault(key, []).append(fn(tmp, f"{key}-{n}", *fn_args))

    texts = [
        f"request {i}: please {'fix the SQL join' if i % 2 else 'style the CSS grid'} #{i}"
        for i in range(args.prompts)
    ]
    measure("local_parallel_2", args.repeat, eval_run, args.delay, "local", 2, 1.0)
    measure("local_parallel_8", args.repeat, eval_run, args.delay, "local", 8, 1.0)
    measure("embed_local_1_thread", args.repeat, embed_run, texts, LocalExecutor(), 1)
    measure("embed_local_2_threads", args.repeat, embed_run, texts, LocalExecutor(), 2)
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, _temp_dir=str(tmp / "ray"), include_dashboard=False, log_to_driver=False)
    runs["ray_start"] = [time.perf_counter() - start]
    try:
        # the first run on the fresh instance: its worker processes start and import fugu inside the time
        measure("ray_quarter_cpu_cold", 1, eval_run, args.delay, "ray", None, 0.25)
        measure("ray_1_cpu_per_job", args.repeat, eval_run, args.delay, "ray", None, 1.0)
        measure("ray_quarter_cpu_per_job", args.repeat, eval_run, args.delay, "ray", None, 0.25)
        on_ray = RayExecutor(ClusterSpec())
        measure("embed_ray_cold", 1, embed_run, texts, on_ray, 1)  # each worker loads the backbone
        measure("embed_ray", args.repeat, embed_run, texts, on_ray, 1)
        on_ray.close()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    if args.json:
        meta = {"jobs": 2 * TASKS, "delay_s": args.delay, "cpus": os.cpu_count(), "prompts": args.prompts}
        meta |= {"load_start": load[0], "load_end": os.getloadavg()[0]}
        print(json.dumps({**meta, "median_s": medians, "runs_s": runs}))
        return

    def row(label: str, key: str) -> str:
        each = ", ".join(f"{v:.1f}" for v in runs[key])
        return f"  {label:<40} {medians[key]:7.1f} s   ({each})"

    print(f"load average (1 min) at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
    print(f"fugu eval, {2 * TASKS} jobs, loopback delay {args.delay:g} s a call, {os.cpu_count()} CPUs here:")
    print(row("local, --parallel 2 (default)", "local_parallel_2"))
    print(row("local, --parallel 8", "local_parallel_8"))
    print(row(f"Ray instance start ({args.cpus} CPUs)", "ray_start"))
    print(row("Ray, 0.25 CPU a job, first run (cold)", "ray_quarter_cpu_cold"))
    print(row("Ray, 1 CPU a job", "ray_1_cpu_per_job"))
    print(row("Ray, 0.25 CPU a job", "ray_quarter_cpu_per_job"))
    print(f"embedding pass, {args.prompts} prompts, MiniLM, uncached:")
    print(row("local, 1 torch thread", "embed_local_1_thread"))
    print(row("local, 2 torch threads", "embed_local_2_threads"))
    print(row("Ray, first pass (workers load MiniLM)", "embed_ray_cold"))
    print(row(f"Ray, {args.cpus} CPUs, 1 thread a task", "embed_ray"))


if __name__ == "__main__":
    main()
