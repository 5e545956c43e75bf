"""Prints litellm's import time and the median latency of one loopback completion through LiteLLMClient.

Run: `PYTHONPATH=. .venv/bin/python tests/llm/bench_client.py [N]` (a benchmark, not a test).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from fugu_cli.llm.client import ClientConfig, LiteLLMClient, load_litellm
from fugu_cli.types import Message, Worker
from tests.loopback import LoopbackServer


def import_seconds() -> float:
    code = "import time; t = time.perf_counter(); import litellm; print(time.perf_counter() - t)"
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip())


def main(n: int = 20) -> None:
    imports = sorted(import_seconds() for _ in range(3))
    print(f"litellm import: median {imports[1]:.2f} s (min {imports[0]:.2f}, max {imports[2]:.2f})")
    load_litellm()
    messages = [Message("system", "You are fugu."), Message("user", "hello")]
    with LoopbackServer() as server:
        worker = Worker("bench", "openai/test-model", api_base=server.base_url, price_in=1.0, price_out=1.0)
        client = LiteLLMClient(ClientConfig())
        client.complete(worker, messages, [])
        for label, on_text in (("plain", None), ("streamed", lambda _t: None)):
            times = []
            for _ in range(n):
                start = time.perf_counter()
                client.complete(worker, messages, [], on_text=on_text)
                times.append((time.perf_counter() - start) * 1000)
            p90 = sorted(times)[int(0.9 * (n - 1))]
            print(
                f"loopback completion ({label}): median {statistics.median(times):.1f} ms, p90 {p90:.1f} ms"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
