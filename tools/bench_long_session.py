"""A scripted long session: 300 steps (30 turns of 9 tool steps and an answer) against three loopback
workers with windows of 8k, 32k and 200k tokens, tool outputs asked for up to 200 KB.

The loopback plays a provider that counts every request with litellm's own `token_counter` and refuses, with a
context-window error, any request over its worker's window. Reports: context-window errors (must be 0), the
largest request each worker saw against its window, compactions, fugu's own time per step (wall time less the
LLM call and the tool's run) near step 10 and near step 300, and peak RSS.

Run: `PYTHONPATH=. .venv/bin/python tools/bench_long_session.py [--turns 30] [--json]` (a benchmark, not a
test; it runs everything in one process, the loopback server included).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from fugu_cli.events import Compacted, Event, StepFinished, ToolFinished, ToolStarted
from fugu_cli.llm import LLM
from fugu_cli.types import Completion, Message, Worker
from tests.helpers import git, write_pool
from tests.loopback import LoopbackServer

WINDOWS = {"w8k": 8_192, "w32k": 32_768, "w200k": 200_000}
# asked-for tool output sizes in bytes, one per tool step of a turn (the tools bound what reaches the model)
SIZES = (200_000, 2_000, 50_000, 500, 20_000, 120_000, 1_000, 8_000, 200_000)


class WindowedLoopback(LoopbackServer):
    """A provider with a window per model: counts each request with litellm and refuses what does not fit.
    Replies: a summary to a request without tools (a summarizer), else the script of the benchmark."""

    def __init__(self, script: Callable[[int], dict[str, Any]]) -> None:
        super().__init__()
        self.script_at = script
        self.steps = 0
        self.seen: list[tuple[str, int, int]] = []  # (model, tokens, window)
        self.overflows = 0
        self._count_lock = threading.Lock()

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        import litellm

        name = (model or "").split("/")[-1]
        window = WINDOWS.get(name, 200_000)
        tokens = litellm.token_counter(
            model="gpt-4", messages=body.get("messages", []), tools=body.get("tools") or None
        )
        with self._count_lock:
            self.seen.append((name, tokens, window))
            if tokens > window:
                self.overflows += 1
                return {
                    "fault": 400,
                    "message": f"This model's maximum context length is {window} tokens. However, your "
                    f"messages resulted in {tokens} tokens.",
                    "code": "context_length_exceeded",
                }
            if not body.get("tools"):
                return {"content": "SUMMARY: the user asked for log inspection; logs were read in slices."}
            self.steps += 1
            return self.script_at(self.steps)


def script(step: int) -> dict[str, Any]:
    """Step k of a turn (1-based, 10 a turn): nine tool calls, then an answer."""
    k = (step - 1) % 10
    if k == 9:
        return {"content": f"Turn done after step {step}."}
    if k % 2 == 0:
        args: dict[str, Any] = {"command": f"head -c {SIZES[k]} logs/big.log"}
        return {"tool_calls": [{"name": "shell", "arguments": args}]}
    return {"tool_calls": [{"name": "read_file", "arguments": {"path": f"src/mod{step % 7}.py"}}]}


@dataclass
class TimedLLM:
    """The real client, timed: the time spent inside LLM calls is not fugu's own."""

    inner: LLM
    spent: float = 0.0
    spent_cpu: float = 0.0  # of the calling thread: building the request, reading the reply
    calls: int = 0

    def warm(self, workers: Sequence[Worker] = ()) -> None:
        self.inner.warm(workers)

    def complete(
        self,
        worker: Worker,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            return self.inner.complete(worker, messages, tools, on_text=on_text, cancel=cancel)
        finally:
            self.spent += time.perf_counter() - start
            self.spent_cpu += time.thread_time() - start_cpu
            self.calls += 1


@dataclass
class Clock:
    """Splits each step's time into LLM, tool and fugu's own: wall time less the LLM call and the tool's
    run, and the session thread's CPU time less the tool's (other threads, litellm's own logging thread
    among them, and other processes on a shared machine only show in the wall figure)."""

    llm: TimedLLM
    own_ms: list[float] = field(default_factory=list)
    own_cpu_ms: list[float] = field(default_factory=list)
    compactions: list[Compacted] = field(default_factory=list)
    last: float = field(default_factory=time.perf_counter)
    last_cpu: float = field(default_factory=time.thread_time)
    llm_at_last: float = 0.0
    llm_cpu_at_last: float = 0.0
    tool_started: tuple[float, float] = (0.0, 0.0)
    tools: float = 0.0
    tools_cpu: float = 0.0

    def start_turn(self) -> None:
        self.last, self.last_cpu, self.llm_at_last = time.perf_counter(), time.thread_time(), self.llm.spent
        self.llm_cpu_at_last, self.tools, self.tools_cpu = self.llm.spent_cpu, 0.0, 0.0

    def on_event(self, event: Event) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if isinstance(event, ToolStarted):
            self.tool_started = (now, cpu)
        elif isinstance(event, ToolFinished):
            self.tools += now - self.tool_started[0]
            self.tools_cpu += cpu - self.tool_started[1]
        elif isinstance(event, Compacted):
            self.compactions.append(event)
        elif isinstance(event, StepFinished):
            wall = now - self.last
            self.own_ms.append((wall - (self.llm.spent - self.llm_at_last) - self.tools) * 1000)
            llm_cpu = self.llm.spent_cpu - self.llm_cpu_at_last
            self.own_cpu_ms.append((cpu - self.last_cpu - self.tools_cpu - llm_cpu) * 1000)
            self.last, self.last_cpu, self.llm_at_last = now, cpu, self.llm.spent
            self.llm_cpu_at_last = self.llm.spent_cpu
            self.tools = self.tools_cpu = 0.0


def make_repo(root: Path) -> None:
    git(root, "init", "-q", "-b", "main")
    (root / "logs").mkdir()
    (root / "src").mkdir()
    lines = [
        f"2026-12-01T03:{i // 60 % 60:02d}:{i % 60:02d} INFO worker {i % 17} handled request {i}"
        for i in range(6000)
    ]
    (root / "logs" / "big.log").write_text("\n".join(lines) + "\n")
    for i in range(7):
        body = "".join(f"def handler_{i}_{j}(request):\n    return request.get({j!r})\n\n" for j in range(40))
        (root / "src" / f"mod{i}.py").write_text(body)
    git(root, "add", "-A")
    git(root, "-c", "user.email=b@example.com", "-c", "user.name=b", "commit", "-qm", "init")


def run(turns: int) -> dict[str, Any]:
    from fugu_cli.app import build_session, make_llm
    from fugu_cli.config import load_config
    from fugu_cli.options import RunOptions

    work = Path(tempfile.mkdtemp(prefix="fugu-long-"))
    os.environ["FUGU_HOME"] = str(work / "home")
    repo = work / "repo"
    repo.mkdir()
    make_repo(repo)
    with WindowedLoopback(script) as server:
        workers = [
            {
                "name": n,
                "model": f"openai/{n}",
                "api_base": server.base_url,
                "context_limit": w,
                "priority": p,
                "price_in": price,
                "price_out": price * 4,
            }
            for (n, w), p, price in zip(WINDOWS.items(), (3, 2, 1), (0.1, 0.5, 3.0), strict=True)
        ]
        pool = write_pool(work / "pool.toml", workers)
        opts = RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto", max_turns=12)
        llm = TimedLLM(make_llm(load_config(repo, opts.overrides())))
        session = build_session(opts, llm=llm, tokens=_real_tokens())
        clock = Clock(llm)
        started = time.perf_counter()
        statuses = []
        for t in range(turns):
            clock.start_turn()
            result = session.run_turn(f"turn {t + 1}: inspect the next slice of logs/big.log", clock.on_event)
            statuses.append(result.status)
        elapsed = time.perf_counter() - started
    return _report(server, clock, statuses, elapsed, llm)


def _real_tokens() -> Any:
    from fugu_cli.llm.client import load_litellm
    from fugu_cli.llm.tokens import LiteLLMTokens

    return LiteLLMTokens(load_litellm)


def _report(
    server: WindowedLoopback, clock: Clock, statuses: Sequence[str], elapsed: float, llm: TimedLLM
) -> dict[str, Any]:
    own, cpu = clock.own_ms, clock.own_cpu_ms
    per_worker: dict[str, dict[str, int]] = {}
    for name, tokens, window in server.seen:
        row = per_worker.setdefault(name, {"requests": 0, "max_tokens": 0, "window": window, "over": 0})
        row["requests"] += 1
        row["max_tokens"] = max(row["max_tokens"], tokens)
        row["over"] += int(tokens > window)
    # a step's own time depends on where it sits in its turn (the first step builds the repo map, a step
    # after a large tool output counts that output's tokens), so compare whole turns: the second turn
    # (steps 11-20, around step 10) against the last one (around step 300)
    early, late = own[10:20], own[-10:]
    cpu_early, cpu_late = cpu[10:20], cpu[-10:]
    # the same over five turns each side (steps 11-60 against 251-300): less at the mercy of a busy moment
    wide = (own[10:60], own[-50:], cpu[10:60], cpu[-50:])
    triggers: dict[str, int] = {}
    for c in clock.compactions:
        triggers[c.trigger] = triggers.get(c.trigger, 0) + 1
    return {
        "steps": len(own),
        "turns": len(statuses),
        "all_turns_succeeded": all(s == "success" for s in statuses),
        "context_window_errors": server.overflows,
        "workers": per_worker,
        "compactions": len(clock.compactions),
        "compaction_triggers": triggers,
        "tokens_before_after": [(c.tokens_before, c.tokens_after) for c in clock.compactions[:5]],
        "own_ms_turn2_median_mean": _stats(early),
        "own_ms_last_turn_median_mean": _stats(late),
        "own_ratio_last_turn_over_turn2_median_mean": _ratio(late, early),
        "own_cpu_ms_turn2_median_mean": _stats(cpu_early),
        "own_cpu_ms_last_turn_median_mean": _stats(cpu_late),
        "own_cpu_ratio_last_turn_over_turn2_median_mean": _ratio(cpu_late, cpu_early),
        "own_ratio_turns_26_30_over_2_6_median_mean": _ratio(wide[1], wide[0]),
        "own_cpu_ratio_turns_26_30_over_2_6_median_mean": _ratio(wide[3], wide[2]),
        "own_cpu_ms_median_per_50_steps": [
            round(statistics.median(cpu[i : i + 50]), 2) for i in range(0, len(cpu), 50) if cpu[i : i + 50]
        ],
        "own_ms_median_per_50_steps": [
            round(statistics.median(own[i : i + 50]), 2) for i in range(0, len(own), 50) if own[i : i + 50]
        ],
        "llm_calls": llm.calls,
        "llm_seconds": round(llm.spent, 1),
        "elapsed_s": round(elapsed, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _stats(values: list[float]) -> list[float] | None:
    return [round(statistics.median(values), 2), round(statistics.fmean(values), 2)] if values else None


def _ratio(late: list[float], early: list[float]) -> list[float] | None:
    if not late or not early:
        return None
    return [
        round(statistics.median(late) / statistics.median(early), 2),
        round(statistics.fmean(late) / statistics.fmean(early), 2),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30, help="turns of 10 steps (default 30: 300 steps)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    report = run(args.turns)
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    ok = report["context_window_errors"] == 0 and report["all_turns_succeeded"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
