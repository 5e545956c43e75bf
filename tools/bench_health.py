"""Benchmarks worker health in a real `fugu serve` process: a pool whose preferred worker is dead (a loopback
provider that answers every request with 503) beside a healthy one, N sequential pass-through requests
(model `fugu`), each figure beside its floor measured in the same run: the same requests to a pool of two
healthy workers.

Four arms, each its own server and FUGU_HOME, with fugu's default `[llm]` retries (4 attempts, backoff from
0.5 s): healthy (the floor); one dead worker with the default cool-down (`cooldown_s` 30); the same with a
cool-down so short (0.1 s, no doubling) that every later request probes the dead worker once; and without a
cool-down (`cooldown_s = 0`: every call tries the dead worker again, as fugu did before worker health).
Reported per arm: upstream calls per request (at the dead worker, and in all), and the median latency with
its ratio to the healthy pool's.

Run: `PYTHONPATH=. .venv/bin/python tools/bench_health.py [--requests 7]` (a benchmark, not a test; loopback
traffic only; it stops by itself).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.loopback import LoopbackServer  # noqa: E402  (after the path: run from anywhere)


class Served:
    """A `fugu serve` process in a fresh git repo with `config` as its user config."""

    def __init__(self, work: Path, first: LoopbackServer, second: LoopbackServer, config: str) -> None:
        repo, home = work / "repo", work / "home"
        repo.mkdir(parents=True)
        home.mkdir()
        (home / "config.toml").write_text(config)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        pool = work / "pool.toml"
        pool.write_text(
            f'[[workers]]\nname = "alpha"\nmodel = "openai/alpha"\napi_base = "{first.base_url}"\n'
            "price_in = 1.0\nprice_out = 2.0\npriority = 2\n\n"
            f'[[workers]]\nname = "beta"\nmodel = "openai/beta"\napi_base = "{second.base_url}"\n'
            "price_in = 1.0\nprice_out = 2.0\npriority = 1\n"
        )
        env = dict(os.environ, FUGU_HOME=str(home), PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fugu_cli", "serve", "--port", "0", "--pool", str(pool)],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening" not in line:
            raise SystemExit(f"fugu serve did not start: {line!r}")
        self.url = line.split("listening on ", 1)[1].split()[0].rstrip("/")
        if not self.url.endswith("/v1"):
            self.url += "/v1"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _arm(name: str, dead: bool, config: str, requests: int) -> dict[str, Any]:
    import openai

    first = LoopbackServer(default_reply={"fault": 503} if dead else "ok from alpha").start()
    second = LoopbackServer(default_reply="ok from beta").start()
    with tempfile.TemporaryDirectory() as tmp:
        served = Served(Path(tmp), first, second, config)
        client = openai.OpenAI(base_url=served.url, api_key="sk-bench", max_retries=0, timeout=300)
        client.models.list()  # the server is up and has resolved its pool
        at_first, total, times, ok = [], [], [], 0
        try:
            for i in range(requests):
                before = (len(first.requests), len(first.requests) + len(second.requests))
                start = time.perf_counter()
                reply = client.chat.completions.create(
                    model="fugu", messages=[{"role": "user", "content": f"request {i}"}]
                )
                times.append((time.perf_counter() - start) * 1000)
                ok += int(bool(reply.choices[0].message.content))
                at_first.append(len(first.requests) - before[0])
                total.append(len(first.requests) + len(second.requests) - before[1])
        finally:
            served.stop()
            first.stop()
            second.stop()
    return {"name": name, "at_first": at_first, "total": total, "ms": times, "ok": ok}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=7)
    args = ap.parse_args()
    load = os.getloadavg()[0]
    arms = [
        _arm("healthy pool (floor)", False, "", args.requests),
        _arm("alpha dead, cool-down (default)", True, "", args.requests),
        _arm(
            "alpha dead, 0.1 s cool-down",
            True,
            "[llm]\ncooldown_s = 0.1\ncooldown_max_s = 0.1\n",
            args.requests,
        ),
        _arm("alpha dead, no cool-down", True, "[llm]\ncooldown_s = 0\n", args.requests),
    ]
    floor = statistics.median(arms[0]["ms"])
    print(f"{args.requests} sequential pass-through requests per arm; load average {load:.1f}\n")
    head = f"{'arm':<34}{'ok':>5}  {'calls at alpha, per request':<30}{'all calls':<24}"
    print(f"{head}{'median ms':>10}{'x floor':>9}")
    for arm in arms:
        med = statistics.median(arm["ms"])
        at_first = " ".join(str(n) for n in arm["at_first"])
        total = " ".join(str(n) for n in arm["total"])
        print(f"{arm['name']:<34}{arm['ok']:>5}  {at_first:<30}{total:<24}{med:>10.1f}{med / floor:>8.1f}x")
    print("\nmedian latency of the requests after the first:")
    rest = {a["name"]: statistics.median(a["ms"][1:]) for a in arms}
    for name, med in rest.items():
        print(f"  {name:<34}{med:>10.1f} ms  {med / statistics.median(arms[0]['ms'][1:]):6.1f}x floor")


if __name__ == "__main__":
    main()
