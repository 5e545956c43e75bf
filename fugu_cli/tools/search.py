"""Search tools: glob (find files by name) and grep (find lines by regex).

Read-only. Both see what git does not ignore (listing.py), unless the model names an ignored folder; grep
skips binaries; results are capped with a count of the rest; undecodable file names are shown escaped.
Matching uses the `regex` engine with a time limit, so a catastrophic pattern or a cancel stops it.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.tools.listing import SKIP_DIRS, visible_files, walk
from fugu_cli.tools.textio import BINARY_SAMPLE, shown

MAX_GLOB_RESULTS = 500
MAX_GREP_MATCHES = 200
MAX_GREP_LINE = 300
MAX_GREP_FILE_BYTES = 2_000_000
TIME_LIMIT_S = 20.0  # one glob or grep call
SLICE_S = 1.0  # one regex search: longer means backtracking gone wild (and cancel waits at most this)


class _Stopped(Exception):
    pass


def glob(inv: Invocation, pattern: str) -> str:
    """Find files and directories by glob pattern; returns sorted paths relative to the repository root.

    `*` matches within one path segment, `**` across directories: use "**/*.py" for all Python files,
    "src/**/test_*.py" for tests under src. Directories are listed with a trailing "/". Files git ignores
    and .venv, node_modules, __pycache__ are skipped unless the pattern names their folder.

    Args:
        pattern: Glob pattern relative to the repository root, e.g. "**/*.py" or "docs/*.md" (or
            "../lib/**/*.py" in a folder added beside the repository).
    """
    pattern = pattern.strip().removeprefix("./")
    if not pattern:
        raise ToolFailed("pattern is empty; try '**/*' to list everything.")
    start = _literal_dir(inv.root, pattern)
    if pattern.startswith("/") or (".." in pattern.split("/") and not _added(inv, start, pattern)):
        raise ToolFailed(
            "pattern must be relative to the repository root and must not contain '..' (except to name a "
            "folder added beside the repository: '../lib/**/*.py')."
        )
    regex = _compile(_glob_to_regex(pattern), "glob pattern")
    named = frozenset(part for part in pattern.split("/") if part in SKIP_DIRS)
    files = _files_under(inv, start.resolve() if ".." in pattern.split("/") else start, named)
    deadline = time.monotonic() + TIME_LIMIT_S
    hits: list[str] = []
    for rel, is_dir in _with_dirs(files):
        if _search(regex, rel, deadline, inv, full=True):
            hits.append(rel + "/" if is_dir else rel)
    hits.sort()
    if not hits:
        hint = f" Use '**/{pattern}' to search subdirectories too." if "/" not in pattern else ""
        return f"No files match {pattern!r} (files git ignores are skipped).{hint}"
    shown_hits = [shown(h) for h in hits[:MAX_GLOB_RESULTS]]
    more = len(hits) - len(shown_hits)
    tail = f"\n[{more} more matches not shown; use a narrower pattern]" if more else ""
    return "\n".join(shown_hits) + tail


def grep(inv: Invocation, pattern: str, path: str | None = None) -> str:
    """Search file contents with a Python regular expression; returns `path:line: text` lines.

    Binary files, files git ignores, .git, .venv, node_modules and __pycache__ are skipped (name an
    ignored folder in `path` to search it anyway).

    Args:
        pattern: Python regular expression (re module syntax), e.g. "def \\w+_test" or "TODO|FIXME".
        path: File or directory to search, relative to the repository root. Default: the whole repository.
    """
    regex = _compile(pattern, "regular expression")
    start = inv.resolve(path or ".")
    if not start.exists():
        raise ToolFailed(f"{path} does not exist.")
    files = [inv.rel(start)] if start.is_file() else _files_under(inv, start, frozenset())
    deadline = time.monotonic() + TIME_LIMIT_S
    out: list[str] = []
    total = searched = 0
    stopped = ""
    try:
        for rel in files:
            for number, line in _matching_lines(inv, inv.root / rel, regex, deadline):
                total += 1
                if len(out) < MAX_GREP_MATCHES:
                    text = line if len(line) <= MAX_GREP_LINE else line[:MAX_GREP_LINE] + " [...]"
                    out.append(f"{shown(rel)}:{number}: {shown(text)}")
            searched += 1
    except _Stopped as why:
        stopped = f"[search stopped: {why}; {searched} of {len(files)} files searched]"
    if not out and not stopped:
        return f"No matches for {pattern!r} in {path or 'the repository'} (files git ignores are skipped)."
    if total > len(out):
        out.append(f"[{total - len(out)} more matches not shown; narrow the pattern or the path]")
    if stopped:
        out.append(stopped)
    return "\n".join(out)


def _compile(pattern: str, what: str) -> Any:
    import regex

    try:
        return regex.compile(pattern, regex.MULTILINE)
    except (regex.error, ValueError, OverflowError) as exc:
        raise ToolFailed(f"Invalid {what} {pattern!r}: {exc}") from exc


def _search(compiled: Any, text: str, deadline: float, inv: Invocation, full: bool = False) -> bool:
    """One match attempt, bounded by SLICE_S and the call's deadline; raises _Stopped past either."""
    if inv.ctx.cancel is not None and inv.ctx.cancel.is_set():
        raise _Stopped("the turn was cancelled")
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Stopped(f"it took longer than {TIME_LIMIT_S:g} s; narrow the path or simplify the pattern")
    try:
        if full:
            return compiled.fullmatch(text, timeout=min(left, SLICE_S)) is not None
        return compiled.search(text, timeout=min(left, SLICE_S)) is not None
    except TimeoutError:
        if time.monotonic() >= deadline:
            raise _Stopped(
                f"it took longer than {TIME_LIMIT_S:g} s; narrow the path or simplify the pattern"
            ) from None
        raise _Stopped(
            f"the pattern needed over {SLICE_S:g} s on one text (catastrophic backtracking, as in (a+)+$?); "
            "simplify it"
        ) from None


def _files_under(inv: Invocation, start: Path, named: frozenset[str]) -> list[str]:
    """Visible files under `start`; if none but `start` holds files (git ignores it), all of them. Paths are
    the root's (`../lib/x.py` in a folder added beside it)."""
    outside = [d for d in inv.ctx.dirs if start.is_relative_to(d)]
    top = inv.root if start.is_relative_to(inv.root) or not outside else outside[0]
    rel = start.relative_to(top).as_posix() if start.is_relative_to(top) else "."
    prefix = "" if rel == "." else rel + "/"
    files = [f for f in visible_files(top, named, inv.ctx.cancel) if f.startswith(prefix)]
    if not files and prefix and start.is_dir():
        files = list(walk(top, start, honour_ignores=False))
    if top == inv.root:
        return files
    return [inv.rel(top / f) for f in files]


def _added(inv: Invocation, start: Path, pattern: str) -> bool:
    """Whether a pattern with `..` names a folder added beside the repository before its first wildcard,
    and no `..` after it."""
    literal = len(start.relative_to(inv.root).parts)
    after = pattern.split("/")[literal:]
    return ".." not in after and any(start.resolve().is_relative_to(d) for d in inv.ctx.dirs)


def _literal_dir(root: Path, pattern: str) -> Path:
    """The deepest existing folder a pattern names before its first wildcard ("src/**/*.py" -> src)."""
    here = root
    for part in pattern.split("/")[:-1]:
        if any(c in part for c in "*?[") or not (here / part).is_dir():
            break
        here = here / part
    return here


def _with_dirs(files: list[str]) -> list[tuple[str, bool]]:
    dirs: dict[str, None] = {}
    for f in files:
        parts = f.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs["/".join(parts[:i])] = None
    return [(d, True) for d in dirs] + [(f, False) for f in files]


def _matching_lines(inv: Invocation, file: Path, compiled: Any, deadline: float) -> list[tuple[int, str]]:
    try:
        info = os.lstat(file)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GREP_FILE_BYTES:
            return []  # links, FIFOs, devices and huge files are not searched
        data = file.read_bytes()
    except OSError:
        return []
    if b"\x00" in data[:BINARY_SAMPLE]:
        return []
    text = data.decode("utf-8", errors="replace")
    if not _search(compiled, text, deadline, inv):
        return []
    return [
        (n, line)
        for n, line in enumerate(text.splitlines(), start=1)
        if _search(compiled, line, deadline, inv)
    ]


def _glob_to_regex(pattern: str) -> str:
    """A regex for the glob; `re.escape` output is valid for the `regex` engine too."""
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
