"""Benchmarks a real `fugu serve` process against a loopback worker, each figure beside its floor measured
in the same run: the same call made directly to the worker with the same client (the openai SDK).

- latency: added time per pass-through call (model `fugu`) over a direct call, median of N sequential calls,
  the router's own decision time (from the replies' `fugu.latency_ms`), and the CPU time the server process
  spends per call (less moved by the machine's load than wall-clock times); beside it a second floor, a
  bare proxy on fugu's own stack (uvicorn, starlette, fugu's event-loop client asking the worker for a
  stream as fugu does) with no routing, session or ledger: what any pass-through built like fugu's pays
  before doing anything of its own; `--history N`: each call resends an agent loop's conversation (a 3 KB
  system prompt, the task, N tool calls with 1 KB results), as real clients do, instead of one short message;
  `--stream`: every call (direct, through fugu, through the bare proxy, which then relays the worker's
  chunks as they come) asks for a stream and reads it to its end, as most agent clients do;
- throughput: requests/s at 1, 8 and 32 concurrent clients with a 0.2 s model delay, for the pass-through and
  for agent turns (`fugu-agent`, one session per client), against direct calls at the same concurrency;
- sessions: the server's resident memory after a warm-up of new agent sessions (100: past the 64 it keeps
  live), then after 100 and 200 more (and the same for pass-through conversations).

Measuring starts once the server's start-up work is over (it loads the router, and litellm if the pool needs
it, in a thread after it starts listening). The loopback worker streams on kept-alive connections
(`--loopback close`: each stream ends by closing its connection, the benchmark's behaviour before 2026-12-01
22:00).

Run: `PYTHONPATH=. .venv/bin/python tools/bench_serve.py [--calls 200] [--router prior|default]
[--history 40]`
(a benchmark, not a test; it sends traffic to 127.0.0.1 only, and stops by itself).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
DELAY_S = 0.2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Served:
    """A `fugu serve` process in a fresh git repo, its pool on the loopback server."""

    def __init__(self, work: Path, loopback_url: str, router: str) -> None:
        repo = work / "repo"
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        # Known to the shipped router's checkpoint, so `--router default` loads the learned one.
        names = ("gpt-5", "claude-sonnet")
        pool = work / "pool.toml"
        pool.write_text(
            "".join(
                f'[[workers]]\nname = "{n}"\nmodel = "openai/{n}"\napi_base = "{loopback_url}"\n'
                f"price_in = 1.0\nprice_out = 2.0\npriority = {2 - i}\n\n"
                for i, n in enumerate(names)
            )
        )
        self.port = _free_port()
        env = dict(os.environ, FUGU_HOME=str(work / "home"), FUGU_ROUTER=router, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fugu_cli", "serve", "--port", str(self.port), "--pool", str(pool)],
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
        self.url = f"http://127.0.0.1:{self.port}/v1"
        _settle(self.proc.pid)

    def rss(self) -> float:
        return _rss_mib(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _settle(pid: int, limit_s: float = 120.0) -> None:
    """Wait until the server's start-up work (importing litellm, loading the router, in a thread of its own
    after the listening line) is over: until it used under 2% of a core for a whole second."""
    deadline = time.monotonic() + limit_s
    before = _cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = _cpu_s(pid)
        if now - before < 0.02:
            return
        before = now


def _client(base_url: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base_url, api_key="sk-bench", max_retries=0, timeout=120)


def _ask(text: str, history: int = 0) -> list[dict[str, Any]]:
    """One user message; with `history`, an agent loop's conversation as clients resend it each call: a
    system prompt (3 KB), the task, then `history` pairs of a tool call and its 1 KB result."""
    if not history:
        return [{"role": "user", "content": text}]
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. Follow the rules. " * 72},
        {"role": "user", "content": text},
    ]
    for k in range(history):
        function = {"name": "read_file", "arguments": f'{{"path": "src/module_{k}.py"}}'}
        call = {"id": f"call_{k}", "type": "function", "function": function}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append(
            {"role": "tool", "tool_call_id": f"call_{k}", "content": f"def f{k}(x):\n    return x\n" * 40}
        )
    return out


def bare_proxy(upstream: str, port: int) -> None:
    """The second floor: a pass-through on fugu's stack that only forwards (`--bare-proxy`): fugu's own
    event-loop client asking for a stream, as `fugu serve` asks for a whole reply from the prior's pool."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    from fugu_cli.llm.direct import AsyncDirect
    from fugu_cli.llm.forward import whole_from_chunks
    from fugu_cli.types import Worker

    client = AsyncDirect(120)
    worker = Worker(name="gpt-5", model="openai/gpt-5", api_base=upstream)
    stream = {"stream": True, "stream_options": {"include_usage": True}, "api_base": upstream}

    async def chat(request: Request) -> Response:
        body = await request.json()
        response = await client.open_stream(worker, body | stream)
        if not body.get("stream"):
            return JSONResponse(whole_from_chunks(await client.read_chunks(response)))

        async def relay() -> AsyncIterator[bytes]:
            async for chunk in client.iter_chunks(response):
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(relay(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    print("listening", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


class BareProxy:
    def __init__(self, upstream: str) -> None:
        self.port = _free_port()
        command = [sys.executable, str(Path(__file__).resolve()), "--bare-proxy", upstream, str(self.port)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        if "listening" not in self.proc.stdout.readline():
            raise SystemExit("the bare proxy did not start")
        self.url = f"http://127.0.0.1:{self.port}/v1"
        _settle(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def latency(served: Served, direct_url: str, calls: int, history: int = 0, stream: bool = False) -> None:
    bare = BareProxy(direct_url)
    try:
        _latency(served, bare, direct_url, calls, history, stream)
    finally:
        bare.stop()


def _latency(
    served: Served, bare_proxy: BareProxy, direct_url: str, calls: int, history: int, stream: bool
) -> None:
    direct, fugu, bare = _client(direct_url), _client(served.url), _client(bare_proxy.url)
    decisions: list[float] = []

    def ask(client: Any, model: str, i: int) -> Any:
        messages = _ask(f"hello {i}", history)
        if not stream:
            return client.chat.completions.create(model=model, messages=messages)
        chunks = list(client.chat.completions.create(model=model, messages=messages, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "done", chunks
        return chunks[0]

    def via_fugu(i: int) -> None:
        reply = ask(fugu, "fugu", i)
        decisions.append(float(reply.model_extra["fugu"]["latency_ms"]))

    def straight(i: int) -> None:
        ask(direct, "gpt-5", i)

    def via_bare(i: int) -> None:
        ask(bare, "gpt-5", i)

    for warm in range(20):  # imports, first connections, the router's first decisions
        via_fugu(-warm)
        straight(-warm)
        via_bare(-warm)
    a, b, c = [], [], []
    cpu, cpu_bare = _cpu_s(served.proc.pid), _cpu_s(bare_proxy.proc.pid)
    for i in range(calls):  # interleaved, so load on the machine hits all three alike
        a.append(_timed(straight, i))
        b.append(_timed(via_fugu, i))
        c.append(_timed(via_bare, i))
    cpu_ms = (_cpu_s(served.proc.pid) - cpu) * 1000 / calls
    cpu_bare_ms = (_cpu_s(bare_proxy.proc.pid) - cpu_bare) * 1000 / calls
    base, through = statistics.median(a), statistics.median(b)
    router = statistics.median(decisions[20:])
    size = len(json.dumps(_ask("hello 0", history))) / 1024
    shown = f"{len(_ask('', history))} messages, {size:.0f} KB" if history else "one short message"
    kind = "streamed (read to its end)" if stream else "non-streamed"
    print(f"latency, one {kind} chat completion ({shown}), openai SDK, N={calls} (median / p90):")
    print(f"  direct to the worker (floor)   {base:7.2f} ms / {_p90(a):7.2f} ms")
    print(f"  through fugu (model fugu)      {through:7.2f} ms / {_p90(b):7.2f} ms")
    print(
        f"  added by fugu                  {through - base:+7.2f} ms  (router decision {router:.2f} ms of it)"
    )
    added = statistics.median([y - x for x, y in zip(a, b, strict=True)])
    print(f"  added, median of paired diffs  {added:+7.2f} ms")
    bare_added = statistics.median([y - x for x, y in zip(a, c, strict=True)])
    print(f"  a bare proxy on the same stack {bare_added:+7.2f} ms  (paired; the second floor)")
    fugu_own = statistics.median([y - x for x, y in zip(c, b, strict=True)])
    print(f"  fugu over the bare proxy       {fugu_own:+7.2f} ms  (paired)")
    print(f"  CPU time of the fugu serve process per call (all its threads): {cpu_ms:.2f} ms")
    print(f"  CPU time of the bare proxy per call: {cpu_bare_ms:.2f} ms")


def _timed(fn: Callable[[int], None], i: int) -> float:
    start = time.perf_counter()
    fn(i)
    return (time.perf_counter() - start) * 1000


def _p90(xs: list[float]) -> float:
    return sorted(xs)[int(0.9 * (len(xs) - 1))]


def _rate(clients: int, per_client: int, call: Callable[[int, int], None]) -> float:
    barrier = threading.Barrier(clients + 1)
    errors: list[BaseException] = []

    def run(c: int) -> None:
        barrier.wait()
        for i in range(per_client):
            try:
                call(c, i)
            except BaseException as e:
                errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        print(f"    ({len(errors)} calls failed: {errors[0]!r})")
    return clients * per_client / wall


def throughput(served: Served, slow_url: str) -> None:
    direct, fugu = _client(slow_url), _client(served.url)
    sessions: dict[int, str] = {}

    def straight(c: int, i: int) -> None:
        direct.chat.completions.create(model="gpt-5", messages=_ask(f"client {c} call {i}"))

    def passthrough(c: int, i: int) -> None:
        fugu.chat.completions.create(model="fugu", messages=_ask(f"client {c} call {i}"))

    def agent(c: int, i: int) -> None:
        headers = {"X-Fugu-Session": sessions[c]} if c in sessions else {}
        raw = fugu.chat.completions.with_raw_response.create(
            model="fugu-agent", messages=_ask(f"client {c} call {i}"), extra_headers=headers
        )
        sessions[c] = raw.headers["x-fugu-session"]

    print(f"throughput, requests/s with a {DELAY_S:g} s model delay (ratio to 1 client):")
    for label, call in (
        ("direct (floor)", straight),
        ("fugu pass-through", passthrough),
        ("fugu-agent turns", agent),
    ):
        _rate(8, 2, call)  # warm-up: connections, the first decisions
        sessions.clear()
        rates = {n: _rate(n, per, call) for n, per in ((1, 10), (8, 8), (32, 6))}
        cells = "  ".join(f"{n:>2} clients {r:6.1f} ({r / rates[1]:4.1f}x)" for n, r in rates.items())
        print(f"  {label:<20} {cells}")
        sessions.clear()


def sessions_memory(served: Served, warmup: int) -> None:
    """RSS after `warmup` new sessions (past the 64 live agent sessions the server keeps, so the live set is
    full), then after 100 and 200 more: what the server holds per session beyond the warm-up is the growth."""
    fugu = _client(served.url)
    marks: dict[str, list[tuple[int, float]]] = {"fugu-agent": [], "fugu": []}
    for model in marks:
        for i in range(1, warmup + 201):
            fugu.chat.completions.create(model=model, messages=_ask(f"new session {model} {i} {time.time()}"))
            if i in (20, warmup, warmup + 100, warmup + 200):
                marks[model].append((i, served.rss()))
    print(f"memory of the fugu serve process (RSS) as new sessions arrive (warm-up: {warmup} sessions):")
    for model, points in marks.items():
        cells = "  ".join(f"after {n:>3}: {mib:6.1f} MiB" for n, mib in points)
        grown = points[-1][1] - points[1][1]
        print(f"  {model:<11} {cells}   growth over the 200 after the warm-up: {grown:+.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--router", default="prior", help="prior, or default (the shipped learned router)")
    parser.add_argument("--only", choices=("latency", "throughput", "sessions"), default=None)
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="latency: each call resends an agent loop's conversation with this many tool calls and results",
    )
    parser.add_argument(
        "--stream", action="store_true", help="latency: every call asks for a stream and reads it to its end"
    )
    parser.add_argument("--warmup", type=int, default=100, help="new sessions before memory is measured")
    parser.add_argument(
        "--loopback",
        choices=("keep-alive", "close"),
        default="keep-alive",
        help="how the loopback worker sends a streamed reply: chunked on a kept-alive connection, as hosted "
        "providers do (fugu streams even a whole reply, to cut a silent worker), or ending by closing the "
        "connection, so that each of fugu's calls opens a new one (the benchmark before 2026-12-01 22:00)",
    )
    parser.add_argument("--bare-proxy", nargs=2, metavar=("UPSTREAM", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.bare_proxy:
        bare_proxy(args.bare_proxy[0], int(args.bare_proxy[1]))
        return
    from tests.loopback import LoopbackServer

    work = Path(tempfile.mkdtemp(prefix="fugu-bench-serve-"))
    keep = args.loopback == "keep-alive"
    with (
        LoopbackServer(keep_alive_streams=keep) as fast,
        LoopbackServer(
            default_reply={"content": "done", "delay_s": DELAY_S}, keep_alive_streams=keep
        ) as slow,
    ):
        served = Served(work / "fast", fast.base_url, args.router)
        slow_served = Served(work / "slow", slow.base_url, args.router)
        try:
            load = os.getloadavg()[0]
            print(
                f"fugu serve (router: {args.router}), loopback workers ({args.loopback} streams), "
                f"{os.cpu_count()} CPUs, load {load:.1f}",
            )
            if args.only in (None, "latency"):
                latency(served, fast.base_url, args.calls, args.history, args.stream)
                print(f"  (load average at the end: {os.getloadavg()[0]:.1f})")
            if args.only in (None, "throughput"):
                throughput(slow_served, slow.base_url)
                print(f"  (load average at the end: {os.getloadavg()[0]:.1f})")
            if args.only in (None, "sessions"):
                sessions_memory(served, args.warmup)
        finally:
            served.stop()
            slow_served.stop()


if __name__ == "__main__":
    main()
