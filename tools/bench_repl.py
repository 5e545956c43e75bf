"""Memory of the REPL, each figure beside its floor measured in the same run:

- idle, prior router: the REPL's resident memory (RSS) once its session is built and it waits at the prompt,
  and again after one turn. Floor: a process that imports what any prompt needs (prompt_toolkit, rich, httpx)
  and waits. `--table-prices`: the pool's workers are models litellm's table prices (gpt-5, gpt-5-mini), with
  no prices of their own, as a newcomer's pool is (the learned router then knows only one of them).
- learned router (the shipped checkpoint): RSS at the prompt, then after each of N turns of 4 steps (three
  `read_file` calls and an answer) against two OpenAI-compatible loopback workers with prices, so no call
  needs litellm. Floor: python + import torch + MiniLM loaded on `bert.py`'s encoder + one forward.

FUGU_HOME's caches are warm, as a user's are after a first run (one turn first, in a REPL of its own). RSS is
read from /proc/PID/status when it has not changed for 2 s (or after 20 s). Linux only.
Run: `PYTHONPATH=. .venv/bin/python tools/bench_repl.py [--turns 10] [--table-prices]` (a benchmark, not a
test).
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pexpect  # noqa: E402

from tests.helpers import make_repo, table_priced_workers, write_pool  # noqa: E402
from tests.loopback import LoopbackServer  # noqa: E402

PROMPT = re.compile(r"fugu (\[\w+\] )?›")
ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>78]|[\r\x08\x07]"
)
WORKERS = ("gpt-5", "claude-sonnet")  # both known to the shipped checkpoint: `--router default` is learned
STEPS = 4
FLOOR_PROMPT = """
import sys, time
import prompt_toolkit, rich.console, httpx
print("ready", flush=True)
sys.stdin.readline()
"""
FLOOR_LEARNED = """
import sys
import torch
from fugu_cli.router.backbone import load_backbone
load_backbone("minilm").encode(["user: warm up"])
print("ready", flush=True)
sys.stdin.readline()
"""


class Steps(LoopbackServer):
    """Every turn: STEPS - 1 `read_file` calls of calc.py, then an answer (counted from the turn's last user
    message)."""

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=0)
        step = 1 + sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
        if step >= STEPS:
            return {"content": f"Done in {step} steps."}
        call = {"id": f"call_{time.monotonic_ns()}", "name": "read_file", "arguments": {"path": "calc.py"}}
        return {"content": None, "tool_calls": [call]}

    def record(self, request: Any) -> None:
        request.body = None  # nothing is asserted on them: keep the server's own memory flat
        super().record(request)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def settled_rss(pid: int, quiet_s: float = 2.0, limit_s: float = 20.0) -> float:
    """RSS once it has stayed within 0.5 MiB for `quiet_s` (background loading done), or after `limit_s`."""
    start = time.monotonic()
    last, since = rss_mib(pid), time.monotonic()
    while time.monotonic() - start < limit_s:
        time.sleep(0.25)
        now = rss_mib(pid)
        if abs(now - last) > 0.5:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            break
    return rss_mib(pid)


class Repl:
    def __init__(self, repo: Path, env: dict[str, str], router: str) -> None:
        exe = Path(sys.executable).parent / "fugu"
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "fugu_cli"]
        self.child = pexpect.spawn(
            cmd[0],
            [*cmd[1:], "--pool", "pool.toml", "--router", router],
            cwd=str(repo),
            env=env,
            encoding="utf-8",
            dimensions=(40, 120),
            timeout=180,
        )
        self.screen = ""

    def wait_prompt(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not PROMPT.search(self.screen):
            if time.monotonic() > deadline:
                raise SystemExit(f"no prompt; the screen:\n{self.screen[-2000:]}")
            try:
                self.screen += ESCAPES.sub("", self.child.read_nonblocking(4096, timeout=0.2))
            except pexpect.TIMEOUT:
                continue
        self.screen = ""

    def turn(self, text: str) -> None:
        self.child.send(text + "\r")
        deadline = time.monotonic() + 180
        while "── " not in self.screen:  # the turn's summary line
            if time.monotonic() > deadline:
                raise SystemExit(f"the turn did not finish; the screen:\n{self.screen[-2000:]}")
            try:
                self.screen += ESCAPES.sub("", self.child.read_nonblocking(4096, timeout=0.2))
            except pexpect.TIMEOUT:
                continue
        self.wait_prompt()

    def close(self) -> None:
        time.sleep(0.5)  # a key sent before the prompt switches the tty to raw mode is lost
        self.child.send("/exit\r")
        self.child.expect(pexpect.EOF, timeout=300)  # a loaded machine: shutdown alone took 35 s once
        self.child.close()


def floor_rss(code: str, env: dict[str, str]) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    proc.stdout.readline()
    rss = settled_rss(proc.pid, quiet_s=1.0, limit_s=5.0)
    proc.stdin.write("\n")
    proc.stdin.close()
    proc.wait()
    return rss


def setting(work: Path, server: LoopbackServer, table_prices: bool = False) -> tuple[Path, dict[str, str]]:
    """A repo and an env whose pool has two workers on the loopback, with prices of their own, or with
    `table_prices` models that litellm's table prices (gpt-5, gpt-5-mini) and no prices of their own."""
    repo = make_repo(work / "repo")
    rows: list[dict[str, object]] = [
        {"name": n, "model": f"openai/{n}", "api_base": server.base_url, "price_in": 1.0, "price_out": 2.0}
        for n in WORKERS
    ]
    if table_prices:
        rows = table_priced_workers(server.base_url)
    write_pool(repo / "pool.toml", rows)
    (repo / ".git" / "info" / "exclude").write_text("pool.toml\n")
    env = dict(
        os.environ,
        FUGU_HOME=str(work / "home"),
        PYTHONPATH=str(ROOT),
        TERM="xterm",
        NO_COLOR="1",
        PROMPT_TOOLKIT_NO_CPR="1",
        OMP_WAIT_POLICY="PASSIVE",
    )
    return repo, env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="turns of the learned REPL")
    parser.add_argument(
        "--table-prices",
        action="store_true",
        help="a pool as a newcomer writes one: models litellm's table prices, no prices of their own",
    )
    args = parser.parse_args(argv)
    compileall.compile_dir(ROOT / "fugu_cli", quiet=1)
    work = Path(tempfile.mkdtemp(prefix="fugu-bench-repl-"))
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start")
    try:
        with Steps() as server:
            repo, env = setting(work, server, args.table_prices)
            for router in ("prior", "default"):  # warm FUGU_HOME's caches, as a first run does
                warm = Repl(repo, env, router)
                warm.wait_prompt()
                warm.turn("read calc.py and say what it does")
                warm.close()
            prior_floor = floor_rss(FLOOR_PROMPT, env)
            repl = Repl(repo, env, "prior")
            repl.wait_prompt()
            prior = settled_rss(repl.child.pid)
            repl.turn("read calc.py and say what it does (prior)")
            after = settled_rss(repl.child.pid, quiet_s=1.0, limit_s=10.0)
            repl.close()
            pool = "litellm's table prices" if args.table_prices else "prices of their own"
            print(f"REPL idle at the prompt, prior router, workers with {pool} (RSS):")
            print(f"  floor: python + prompt_toolkit, rich, httpx  {prior_floor:6.1f} MiB")
            ratio = prior / prior_floor
            print(f"  fugu REPL                                   {prior:6.1f} MiB  ({ratio:.2f}x)")
            ratio = after / prior_floor
            print(f"  the same after one {STEPS}-step turn            {after:6.1f} MiB  ({ratio:.2f}x)")
            learned_floor = floor_rss(FLOOR_LEARNED, env)
            repl = Repl(repo, env, "default")
            repl.wait_prompt()
            marks = [("at the prompt", settled_rss(repl.child.pid))]
            for i in range(1, args.turns + 1):
                repl.turn(f"read calc.py and say what it does ({i})")
                marks.append((f"after turn {i}", settled_rss(repl.child.pid, quiet_s=1.0, limit_s=10.0)))
            repl.close()
            print(f"REPL with the learned router, {STEPS}-step turns (RSS):")
            print(f"  floor: python + torch + MiniLM + one forward {learned_floor:6.1f} MiB")
            for label, mib in marks:
                print(f"  {label:<44} {mib:6.1f} MiB  ({mib / learned_floor:.2f}x)")
            growth = marks[-1][1] - marks[1][1]
            print(f"  growth from turn 1 to turn {args.turns}: {growth:+.1f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
