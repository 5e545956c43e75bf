"""Startup benchmark: median wall time of `fugu --version`, `fugu --help` and launch-to-first-REPL-prompt,
then `fugu -p`'s launch to its first provider request with the prior router beside its floor (python + one
httpx request), interleaved in the same run (bench_run.py's start-up part, prior only).

Targets (DESIGN.md section 10): 150 ms, 300 ms and 600 ms; the prior's launch at most 2x its floor. Also
checks, in a subprocess, that `--version` and `--help` import none of torch, transformers or litellm. Prints
one line per figure; exits 1 if a heavy module was imported (the times are reported, not enforced: they
depend on the machine).
Usage: PYTHONPATH=. python tools/bench_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "litellm")
TARGETS_MS = {"--version": 150, "--help": 300, "repl prompt": 600}
PROMPT = b"fugu \xe2\x80\xba"  # "fugu ›"

IMPORT_PROBE = """
import json, sys
sys.argv = ["fugu", *{args!r}]
from fugu_cli.__main__ import main
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print("\\n" + json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def fugu_command() -> list[str]:
    script = Path(sys.executable).parent / "fugu"
    return [str(script)] if script.exists() else [sys.executable, "-m", "fugu_cli"]


def environment(home: Path) -> dict[str, str]:
    env = dict(os.environ, FUGU_HOME=str(home), HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def time_command(args: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*fugu_command(), *args], env=env, capture_output=True, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def heavy_imports(args: list[str], env: dict[str, str]) -> list[str]:
    code = IMPORT_PROBE.format(args=args, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    result: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def make_repo(root: Path) -> Path:
    """A git repo with a pool file whose one worker needs no key and no server (it is never called)."""
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "pool.toml").write_text('[[workers]]\nname = "bench"\nmodel = "openai/bench"\n')
    return root


def time_to_prompt(repo: Path, env: dict[str, str], runs: int) -> float:
    import pexpect

    env = dict(env, TERM="xterm", NO_COLOR="1", PROMPT_TOOLKIT_NO_CPR="1")
    times = []
    for _ in range(runs):
        cmd = fugu_command()
        start = time.perf_counter()
        child = pexpect.spawn(cmd[0], [*cmd[1:], "--pool", "pool.toml"], cwd=str(repo), env=env, timeout=30)
        child.expect(PROMPT)
        times.append((time.perf_counter() - start) * 1000)
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
        child.close()
    return statistics.median(times)


def report(name: str, ms: float) -> None:
    target = TARGETS_MS[name]
    verdict = "ok" if ms <= target else "over target"
    print(f"{name:<12} median {ms:7.1f} ms  (target {target} ms: {verdict})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (the median is reported)")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="fugu-bench-"))
    try:
        env = environment(tmp / "home")
        for flag in ("--version", "--help"):
            report(flag, time_command([flag], env, args.runs))
        report("repl prompt", time_to_prompt(make_repo(tmp / "repo"), env, args.runs))
        status = 0
        for flag in ("--version", "--help"):
            heavy = heavy_imports([flag], env)
            print(f"fugu {flag} imports {', '.join(heavy) if heavy else 'none of ' + ', '.join(HEAVY)}")
            status |= bool(heavy)
        from bench_run import startup  # this script's folder is on sys.path

        startup(tmp / "launch", args.runs, prior_only=True)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"({os.cpu_count()} CPUs, load average {load:.2f} while measuring)")
        return status
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
