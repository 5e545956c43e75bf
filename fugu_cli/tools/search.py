"""Search tools: glob (find files by name) and grep (find lines by regex).

Read-only; walks the repository without descending into .git or dependency/cache directories.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from fugu_cli.tools.base import Invocation, ToolFailed

MAX_GLOB_RESULTS = 500
MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 300
MAX_GREP_FILE_BYTES = 2_000_000
SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".tox",
    }
)


def glob(inv: Invocation, pattern: str) -> str:
    """Find files and directories by glob pattern; returns sorted paths relative to the repository root.

    `*` matches within one path segment, `**` across directories: use "**/*.py" for all Python files,
    "src/**/test_*.py" for tests under src. Directories are listed with a trailing "/".
    .git, .venv, node_modules and __pycache__ are skipped unless the pattern names them.

    Args:
        pattern: Glob pattern relative to the repository root, e.g. "**/*.py" or "docs/*.md".
    """
    pattern = pattern.strip().removeprefix("./")
    if not pattern:
        raise ToolFailed("pattern is empty; try '**/*' to list everything.")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolFailed("pattern must be relative to the repository root and must not contain '..'.")
    regex = re.compile(_glob_to_regex(pattern))
    named = {part for part in pattern.split("/") if part in SKIP_DIRS}
    hits: list[str] = []
    for rel, is_dir in _walk(inv.root, inv.root, keep=named, with_dirs=True):
        if regex.fullmatch(rel):
            hits.append(rel + "/" if is_dir else rel)
    hits.sort()
    if not hits:
        hint = f" Use '**/{pattern}' to search subdirectories too." if "/" not in pattern else ""
        return f"No files match {pattern!r}.{hint}"
    shown = hits[:MAX_GLOB_RESULTS]
    more = len(hits) - len(shown)
    tail = f"\n[{more} more matches not shown; use a narrower pattern]" if more else ""
    return "\n".join(shown) + tail


def grep(inv: Invocation, pattern: str, path: str | None = None) -> str:
    """Search file contents with a Python regular expression; returns `path:line: text` lines.

    Binary files, .git, .venv, node_modules and __pycache__ are skipped.

    Args:
        pattern: Python regular expression (re module syntax), e.g. "def \\w+_test" or "TODO|FIXME".
        path: File or directory to search, relative to the repository root. Default: the whole repository.
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolFailed(f"Invalid regular expression {pattern!r}: {exc}") from exc
    start = inv.resolve(path or ".")
    if not start.exists():
        raise ToolFailed(f"{path} does not exist.")
    files = [inv.rel(start)] if start.is_file() else sorted(r for r, _ in _walk(inv.root, start, frozenset()))
    out: list[str] = []
    total = 0
    for rel in files:
        for number, line in _matching_lines(inv.root / rel, regex):
            total += 1
            if len(out) < MAX_GREP_MATCHES:
                text = line if len(line) <= MAX_GREP_LINE else line[:MAX_GREP_LINE] + " [...]"
                out.append(f"{rel}:{number}: {text}")
    if not out:
        return f"No matches for {pattern!r} in {path or 'the repository'}."
    if total > len(out):
        out.append(f"[{total - len(out)} more matches not shown; narrow the pattern or the path]")
    return "\n".join(out)


def _walk(
    root: Path, start: Path, keep: frozenset[str] | set[str], with_dirs: bool = False
) -> Iterator[tuple[str, bool]]:
    """Yield (relative posix path, is_dir), pruning SKIP_DIRS not in `keep`; never follows links."""
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS or d in keep)
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        if with_dirs:
            for d in dirnames:
                yield prefix + d, True
        for f in sorted(filenames):
            yield prefix + f, False


def _matching_lines(file: Path, regex: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    try:
        if file.is_symlink() or file.stat().st_size > MAX_GREP_FILE_BYTES:
            return
        data = file.read_bytes()
    except OSError:
        return
    if b"\x00" in data[:8192]:
        return
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if regex.search(line):
            yield number, line


def _glob_to_regex(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : close]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body.replace("\\", "\\\\")) + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)
