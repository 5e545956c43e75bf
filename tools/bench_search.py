"""Measure the ways glob/grep can list and search a repository that has an ignored 10k-file folder.

Builds a git repo in a temp dir: fugu's own sources (tracked) plus `node_modules/` (10,000 small files,
ignored by .gitignore), then times each candidate (median of N runs) and prints a table. Not a test.

    .venv/bin/python tools/bench_search.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PATTERN = r"def \w+_test|TODO"


def build(dest: Path) -> Path:
    repo = dest / "repo"
    shutil.copytree(ROOT / "fugu_cli", repo / "fugu_cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", repo / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    nm = repo / "node_modules"
    for i in range(10_000):
        d = nm / f"pkg{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.js").write_text(f"// TODO module {i}\nfunction f{i}() {{ return {i}; }}\n")
    (repo / ".gitignore").write_text("node_modules/\n")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"}
    commit = ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"]
    for args in (["init", "-q"], ["add", "-A"], commit):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return repo


def median_ms(fn: Callable[[], object], runs: int) -> tuple[float, object]:
    times: list[float] = []
    result: object = None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), result


def walk_all(repo: Path) -> list[str]:
    out: list[str] = []
    for d, dirs, files in os.walk(repo):
        dirs[:] = [x for x in dirs if x != ".git"]
        out += [os.path.relpath(os.path.join(d, f), repo) for f in files]
    return out


def git_ls(repo: Path) -> list[str]:
    argv = ["git", "ls-files", "-co", "--exclude-standard", "-z"]
    return [p for p in subprocess.run(argv, cwd=repo, capture_output=True).stdout.decode().split("\0") if p]


def git_ls_sandboxed(repo: Path) -> list[str]:
    from fugu_cli.tools.gitrun import git

    out = git(repo, "ls-files", "-co", "--exclude-standard", "-z").stdout
    return [p for p in out.split("\0") if p]


def pathspec_walk(repo: Path) -> list[str]:
    import pathspec

    out: list[str] = []
    specs: list[tuple[str, pathspec.PathSpec[Any]]] = []
    for d, dirs, files in os.walk(repo):
        rel = os.path.relpath(d, repo)
        rel = "" if rel == "." else rel + "/"
        gi = Path(d) / ".gitignore"
        if gi.is_file():
            specs.append((rel, pathspec.GitIgnoreSpec.from_lines(gi.read_text().splitlines())))

        def ignored(path: str) -> bool:
            return any(path.startswith(base) and s.match_file(path[len(base) :]) for base, s in specs)

        dirs[:] = [x for x in dirs if x != ".git" and not ignored(rel + x + "/")]
        out += [rel + f for f in files if not ignored(rel + f)]
    return out


def rg_binary() -> str | None:
    """ripgrep, if installed (`pip install 'ripgrep<15'`: 15.x is source-only and needs a Rust toolchain)."""
    local = Path(sys.executable).parent / "rg"
    return str(local) if local.exists() else shutil.which("rg")


def rg_files(repo: Path) -> list[str]:
    rg = rg_binary() or "rg"
    argv = [rg, "--files", "--hidden", "-g", "!.git"]
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True).stdout.split()


def grep_re(repo: Path, files: list[str]) -> int:
    rx = re.compile(PATTERN)
    n = 0
    for f in files:
        try:
            data = (repo / f).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        n += sum(1 for line in data.decode("utf-8", "replace").splitlines() if rx.search(line))
    return n


def grep_regex_module(repo: Path, files: list[str]) -> int:
    import regex

    rx = regex.compile(PATTERN)
    n = 0
    for f in files:
        try:
            data = (repo / f).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        n += sum(1 for line in data.decode("utf-8", "replace").splitlines() if rx.search(line, timeout=1.0))
    return n


def grep_rg(repo: Path) -> int:
    rg = rg_binary() or "rg"
    argv = [rg, "--hidden", "-g", "!.git", "-n", "--no-heading", "-e", PATTERN]
    return len(subprocess.run(argv, cwd=repo, capture_output=True, text=True).stdout.splitlines())


def fugu_grep(repo: Path) -> int:
    from fugu_cli.tools import PermissionPolicy, ToolContext
    from fugu_cli.tools.base import Invocation
    from fugu_cli.tools.search import grep

    ctx = ToolContext(root=repo, agent="bench", policy=PermissionPolicy(mode="read-only"))
    return len(grep(Invocation(ctx, "grep", "read"), PATTERN).splitlines())


def catastrophic(tmp: Path) -> dict[str, str]:
    """`(a+)+$` against 'a'*30 + 'b': Python's re backtracks for ~2^30 steps; the others do not."""
    import regex

    line = "a" * 30 + "b"
    out: dict[str, str] = {}
    t = time.perf_counter()
    try:
        regex.compile(r"(a+)+$").search(line, timeout=1.0)
        out["regex (timeout=1s)"] = f"finished in {(time.perf_counter() - t) * 1000:.0f} ms"
    except TimeoutError:
        out["regex (timeout=1s)"] = f"TimeoutError after {(time.perf_counter() - t) * 1000:.0f} ms"
    code = "import re; re.search(r'(a+)+$', 'a'*30+'b')"
    t = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-c", code], timeout=10)
        out["re"] = f"finished in {(time.perf_counter() - t) * 1000:.0f} ms"
    except subprocess.TimeoutExpired:
        out["re"] = "still running after 10 s (killed)"
    (tmp / "cat.txt").write_text(line + "\n")
    rg = rg_binary()
    if rg is None:
        return out
    t = time.perf_counter()
    subprocess.run([rg, "-e", r"(a+)+$", str(tmp / "cat.txt")], capture_output=True)
    out["rg"] = f"finished in {(time.perf_counter() - t) * 1000:.0f} ms"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = build(Path(tmp))
        print(f"repo: {len(git_ls(repo))} files not ignored, {len(walk_all(repo))} on disk\n")
        print(f"{'listing':<34}{'median ms':>10}{'files':>8}")
        for name, fn in [
            ("os.walk (ignores nothing)", lambda: walk_all(repo)),
            ("git ls-files -co --exclude-standard", lambda: git_ls(repo)),
            ("  the same through gitrun (bwrap)", lambda: git_ls_sandboxed(repo)),
            ("pathspec walk (.gitignore only)", lambda: pathspec_walk(repo)),
            *([("rg --files", lambda: rg_files(repo))] if rg_binary() else []),
        ]:
            ms, res = median_ms(fn, args.runs)
            print(f"{name:<34}{ms:>10.1f}{len(res):>8}")  # type: ignore[arg-type]
        files = git_ls(repo)
        print(f"\n{'grep ' + PATTERN:<34}{'median ms':>10}{'lines':>8}")
        for name, grep in [
            ("ls-files + re", lambda: grep_re(repo, git_ls(repo))),
            ("ls-files + regex(timeout)", lambda: grep_regex_module(repo, git_ls(repo))),
            ("os.walk + re (no ignore)", lambda: grep_re(repo, walk_all(repo))),
            ("fugu grep tool (ls-files via bwrap + regex)", lambda: fugu_grep(repo)),
            *([("rg", lambda: grep_rg(repo))] if rg_binary() else []),
        ]:
            ms, res = median_ms(grep, args.runs)
            print(f"{name:<34}{ms:>10.1f}{res:>8}")
        del files
        print("\ncatastrophic (a+)+$ on 'a'*30+'b':")
        for name, what in catastrophic(Path(tmp)).items():
            print(f"  {name:<20} {what}")


if __name__ == "__main__":
    main()
