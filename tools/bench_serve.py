"""Prints the median latency of one chat completion through `fugu serve` against the same loopback call made
directly, both with litellm's client: the difference is what the server adds (session, routing, store, HTTP).

Run: `PYTHONPATH=. .venv/bin/python tools/bench_serve.py [N]` (a benchmark, not a test).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _median_ms(n: int, call: Callable[[int], Any]) -> tuple[float, float]:
    call(-1)  # warm-up: imports, first connection
    times = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.9 * (n - 1))]


def main(n: int = 30) -> None:
    import litellm

    from fugu_cli.serve import FuguServer, ServeOptions
    from tests.loopback import LoopbackServer

    work = Path(tempfile.mkdtemp(prefix="fugu-bench-serve-"))
    os.environ["FUGU_HOME"] = str(work / "home")
    repo = work / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    messages = [{"role": "user", "content": "hello"}]
    with LoopbackServer() as loopback:
        pool = work / "pool.toml"
        worker = f'name = "bench"\nmodel = "openai/bench"\napi_base = "{loopback.base_url}"\n'
        pool.write_text(f"[[workers]]\n{worker}price_in = 0.0\nprice_out = 0.0\n")
        server = FuguServer(ServeOptions(port=0, cwd=repo, pool=str(pool))).start()
        try:

            def direct(_: int) -> Any:
                return litellm.completion(
                    model="openai/bench", api_base=loopback.base_url, api_key="x", messages=messages
                )

            def fresh(_: int) -> Any:
                return litellm.completion(
                    model="openai/fugu", api_base=server.url, api_key="x", messages=messages
                )

            def continued(_: int) -> Any:
                return litellm.completion(
                    model="openai/fugu",
                    api_base=server.url,
                    api_key="x",
                    messages=messages,
                    extra_headers={"X-Fugu-Session": "bench"},
                )

            rows = [("direct loopback call", direct), ("fugu serve, new session", fresh)]
            rows.append(("fugu serve, continued session", continued))
            results = {label: _median_ms(n, call) for label, call in rows}
        finally:
            server.stop()
    base = results["direct loopback call"][0]
    print(f"one chat completion, litellm client, N={n} (median / p90):")
    for label, (median, p90) in results.items():
        extra = "" if label.startswith("direct") else f"   overhead {median - base:+.1f} ms"
        print(f"  {label:<32} {median:7.1f} ms / {p90:7.1f} ms{extra}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
