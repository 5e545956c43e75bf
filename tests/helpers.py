"""Test helpers: temp git repos with a failing test, pool files for loopback servers, running `fugu`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import zygote

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST = "from calc import add\n\nassert add(2, 3) == 5, 'add(2, 3) should be 5'\nprint('ok')\n"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> Path:
    """A git repo whose test (`python3 test_calc.py`) fails until calc.add is fixed."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "calc.py").write_text(BUGGY)
    (root / "test_calc.py").write_text(TEST)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def tool_reply(*calls: dict[str, Any], content: str | None = None) -> dict[str, Any]:
    return {"content": content, "tool_calls": list(calls)}


def write_pool(path: Path, workers: list[dict[str, Any]]) -> Path:
    lines: list[str] = []
    for w in workers:
        lines.append("[[workers]]")
        for key, value in w.items():
            lines.append(f"{key} = {json.dumps(value)}")
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def table_priced_workers(api_base: str) -> list[dict[str, Any]]:
    """A newcomer's pool (benchmarks): two models litellm's table prices (gpt-5, gpt-5-mini) at `api_base`,
    with no prices or windows of their own."""
    return [{"name": n, "model": f"openai/{n}", "api_base": api_base} for n in ("gpt-5", "gpt-5-mini")]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


def fugu(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> Run:
    """Run the real CLI in a process of its own (as a user would), with the test's FUGU_HOME: forked from the
    test process's fork server, which has imported what every `fugu` imports (tests/zygote.py), else started
    with `python -m fugu_cli`."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    forks = zygote.server(args)
    if forks is not None and forks.suits(full_env):
        return Run(*forks.run(list(args), str(cwd), stdin or "", full_env, timeout))
    proc = subprocess.run(
        [sys.executable, "-m", "fugu_cli", *args],
        cwd=cwd,
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def processes() -> Iterator[tuple[int, str]]:
    """Every process now running: (pid, command line)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            yield int(entry), raw.replace(b"\0", b" ").decode(errors="replace").strip()


def parent_pid(pid: int) -> int:
    """The parent of process `pid`, or -1 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
