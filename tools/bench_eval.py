"""Benchmark: `fugu eval` and the router's embedding pass, here (threads, one process) and on a local Ray
instance, on this machine.

The suite has 64 jobs (32 tasks × 2 workers, each a fresh git repo, a full-auto session and a check) against
loopback workers that answer every call after a fixed delay: `fixer` makes two calls (a write, then "fixed"),
`talker` one. The embedding pass encodes N synthetic prompts with the default backbone (MiniLM), uncached.
Ray runs use one instance (`--cpus` CPUs, started once; its start is reported apart), so its worker processes
start, import fugu and load the backbone inside the measured time, as they would in a first real run.

    PYTHONPATH=. .venv/bin/python tools/bench_eval.py [--delay 0.5] [--cpus 2] [--prompts 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import ray

    from fugu_cli.cluster import ClusterSpec
    from fugu_cli.router.executor import LocalExecutor, RayExecutor

    tmp = Path(tempfile.mkdtemp(prefix="fugu-bench-eval-", dir="/tmp"))
    write_suite(tmp / "suite")
    out: dict[str, Any] = {"jobs": 2 * TASKS, "delay_s": args.delay, "cpus": os.cpu_count()}
    out["local_parallel_2_s"] = eval_run(tmp, "local2", args.delay, "local", 2, 1.0)
    out["local_parallel_8_s"] = eval_run(tmp, "local8", args.delay, "local", 8, 1.0)
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, _temp_dir=str(tmp / "ray"), include_dashboard=False, log_to_driver=False)
    out["ray_start_s"] = time.perf_counter() - start
    try:
        out["ray_1_cpu_per_job_s"] = eval_run(tmp, "ray1", args.delay, "ray", None, 1.0)
        out["ray_quarter_cpu_per_job_s"] = eval_run(tmp, "ray025", args.delay, "ray", None, 0.25)
        # the same again: its 8 worker processes have started and imported fugu (a long run's steady state)
        out["ray_quarter_warm_s"] = eval_run(tmp, "ray025b", args.delay, "ray", None, 0.25)
        texts = [
            f"request {i}: please {'fix the SQL join' if i % 2 else 'style the CSS grid'} #{i}"
            for i in range(args.prompts)
        ]
        out["prompts"] = args.prompts
        out["embed_local_1_thread_s"] = embed_run(tmp, "l1", texts, LocalExecutor(), 1)
        out["embed_local_2_threads_s"] = embed_run(tmp, "l2", texts, LocalExecutor(), 2)
        on_ray = RayExecutor(ClusterSpec())
        out["embed_ray_s"] = embed_run(tmp, "ray", texts, on_ray, 1)
        out["embed_ray_again_s"] = embed_run(tmp, "ray2", texts, on_ray, 1)  # workers warm, backbone loaded
        on_ray.close()
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out))
        return
    print(f"fugu eval, {out['jobs']} jobs, loopback delay {args.delay:g} s a call, {out['cpus']} CPUs:")
    print(f"  local, --parallel 2 (default)      {out['local_parallel_2_s']:7.1f} s")
    print(f"  local, --parallel 8                {out['local_parallel_8_s']:7.1f} s")
    print(f"  Ray instance start ({args.cpus} CPUs)       {out['ray_start_s']:7.1f} s")
    print(f"  Ray, 1 CPU a job (2 at once)       {out['ray_1_cpu_per_job_s']:7.1f} s")
    print(f"  Ray, 0.25 CPU a job (8 at once)    {out['ray_quarter_cpu_per_job_s']:7.1f} s")
    print(f"  the same, workers warm             {out['ray_quarter_warm_s']:7.1f} s")
    print(f"embedding pass, {args.prompts} prompts, MiniLM, uncached:")
    print(f"  local, 1 torch thread              {out['embed_local_1_thread_s']:7.1f} s")
    print(f"  local, 2 torch threads             {out['embed_local_2_threads_s']:7.1f} s")
    print(f"  Ray, {args.cpus} tasks × 1 thread (cold)     {out['embed_ray_s']:7.1f} s")
    print(f"  Ray, again (workers warm)          {out['embed_ray_again_s']:7.1f} s")


if __name__ == "__main__":
    main()
