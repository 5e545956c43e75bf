"""Which files glob and grep see: what git does not ignore, minus dependency and cache folders.

In a git repository the list is `git ls-files -co --exclude-standard` (git's own rules: every .gitignore,
info/exclude, the user's excludes file; tracked files always count). Elsewhere, or inside a folder the
caller named although git ignores it, a walk that honours the .gitignore files it meets (pathspec).
Paths are str with undecodable bytes as surrogate escapes (os.fsdecode), so they open as they are.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fugu_cli.tools.gitrun import git

_Specs = list[tuple[str, Any]]  # (folder prefix, pathspec.GitIgnoreSpec)

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


def visible_files(
    root: Path, keep: frozenset[str] = frozenset(), cancel: threading.Event | None = None
) -> list[str]:
    """Sorted repo-relative posix paths of the files glob and grep consider (not ignored, not noise).

    Folders in SKIP_DIRS are left out unless named in `keep`.
    """
    listed = _git_files(root, cancel)
    files = listed if listed is not None else list(walk(root, root, honour_ignores=True))
    return sorted(f for f in files if not _noise(f, keep))


def _noise(rel: str, keep: frozenset[str]) -> bool:
    return any(part in SKIP_DIRS and part not in keep for part in rel.split("/")[:-1])


def _git_files(root: Path, cancel: threading.Event | None) -> list[str] | None:
    proc = git(root, "ls-files", "-co", "--exclude-standard", "-z", "--", ".", check=False, cancel=cancel)
    if proc.returncode != 0:
        return None
    # tracked files deleted from disk are still in the index; submodules are folders, not files
    return [p for p in dict.fromkeys(proc.stdout.split("\0")) if p and _is_file(root / p)]


def _is_file(path: Path) -> bool:
    return path.is_symlink() or path.is_file()


def walk(root: Path, start: Path, honour_ignores: bool) -> Iterator[str]:
    """Files under `start` as repo-relative posix paths; never follows links, never enters .git."""
    specs: _Specs = []
    for dirpath, dirnames, filenames in os.walk(start):
        base = Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        if honour_ignores:
            _load_gitignore(Path(dirpath), prefix, specs)
        dirnames[:] = sorted(
            d for d in dirnames if d != ".git" and not (honour_ignores and _ignored(prefix + d + "/", specs))
        )
        for f in sorted(filenames):
            if not (honour_ignores and _ignored(prefix + f, specs)):
                yield prefix + f


def _load_gitignore(folder: Path, prefix: str, specs: _Specs) -> None:
    ignore_file = folder / ".gitignore"
    if not ignore_file.is_file():
        return
    import pathspec

    try:
        lines = ignore_file.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
        return
    specs.append((prefix, pathspec.GitIgnoreSpec.from_lines(lines)))


def _ignored(rel: str, specs: _Specs) -> bool:
    return any(rel.startswith(base) and spec.match_file(rel[len(base) :]) for base, spec in specs)
