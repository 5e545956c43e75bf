"""Time the default `fugu router train` (stage 1 with SVF, then stage 2 on the escalation policy), end to end.

    python tools/bench_router_train.py ../shared/data/swebench_verified_dev [--runs 1] [--warm]

Each run is the real command in a subprocess, in a fresh FUGU_HOME (a cold embedding cache, as a first run
has) unless --warm reuses one home across runs. Prints per run the wall time, the CPU time the command used
(user + system, its children included) and the machine's load average before and after, since on a shared
machine the wall time depends on what else runs: CPU time is the figure that does not.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data", type=Path)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="one FUGU_HOME for every run (the cache warms)")
    ap.add_argument("extra", nargs="*", help="more `fugu router train` arguments, after --")
    args = ap.parse_args()
    shared_home = tempfile.mkdtemp(prefix="fugu-train-bench-")
    walls = []
    for run in range(args.runs):
        home = shared_home if args.warm else tempfile.mkdtemp(prefix="fugu-train-bench-")
        out = Path(tempfile.mkdtemp(prefix="fugu-train-out-")) / "ckpt"
        env = {**os.environ, "FUGU_HOME": home, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [
            sys.executable,
            "-m",
            "fugu_cli",
            "router",
            "train",
            "--data",
            str(args.data),
            "--out",
            str(out),
        ]
        before = os.getloadavg()
        used0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([*cmd, *args.extra], env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        used1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (used1.ru_utime - used0.ru_utime) + (used1.ru_stime - used0.ru_stime)
        after = os.getloadavg()
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)
            raise SystemExit(f"run {run}: fugu router train exited {done.returncode}")
        walls.append(wall)
        print(
            f"run {run}: wall {wall:.0f} s ({wall / 60:.1f} min), CPU {cpu:.0f} s, "
            f"load average before {before[0]:.1f}/{before[1]:.1f}/{before[2]:.1f}, "
            f"after {after[0]:.1f}/{after[1]:.1f}/{after[2]:.1f}, {os.cpu_count()} cores, "
            f"{'warm' if args.warm and run else 'cold'} cache",
            flush=True,
        )
    walls.sort()
    print(f"median wall {walls[len(walls) // 2]:.0f} s over {len(walls)} run(s); the bar: 600 s")


if __name__ == "__main__":
    main()
