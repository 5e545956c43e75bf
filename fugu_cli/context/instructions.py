"""Instruction files, layered: the user's own (AGENTS.md beside the user config), the repository root's,
then those of each folder the session works in (the folders from the root down to where fugu was started,
then any folder a tool call reaches later), each folder's AGENTS.md or else its CLAUDE.md; all in that order
within one budget (`[context] instructions_tokens`, counted as characters / 4). A file that does not fit is
cut, and files after the budget is spent are skipped; `/memory` lists what was loaded.

The first three levels go into the system prompt; a folder reached later adds its file to the result of the
tool call that reached it. A folder added beside the repository (--add-dir) counts as a root of its own: its
file joins the system prompt when added at start, else the first call that reaches it. Reads files only.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fugu_cli.hooks import Site
from fugu_cli.tools import ToolContext
from fugu_cli.types import ToolCall, ToolResult

NAMES = ("AGENTS.md", "CLAUDE.md")
_PATH_ARGS = ("path", "file_path")


@dataclass(frozen=True)
class InstructionFile:
    """One instruction file as the session took it."""

    path: Path
    label: str  # "~/.config/fugu/AGENTS.md", "AGENTS.md", "pkg/CLAUDE.md"
    level: str  # user | root | folder | added
    tokens: int  # of the file itself
    used: int  # tokens given to the workers (less when cut; 0 when skipped)

    @property
    def state(self) -> str:
        if self.used == 0:
            return "skipped: over the budget"
        return "cut to fit the budget" if self.used < self.tokens else "loaded"


def tokens(text: str) -> int:
    return (len(text) + 3) // 4


class Instructions:
    """The instruction files of one session and what is left of their budget."""

    def __init__(self, root: Path, cwd: Path, budget: int, user_dir: Path, dirs: Sequence[Path] = ()) -> None:
        self.root = root.resolve()
        self.budget = budget
        self._lock = threading.Lock()
        self._files: list[InstructionFile] = []
        self._seen: set[Path] = set()  # folders whose own file was looked for
        self._roots: list[Path] = [self.root]  # the repository, then the folders added beside it
        self._left = budget
        found = self._initial_files(user_dir, cwd.resolve())
        for folder in dirs:
            self._roots.append(folder.resolve())
            found += self._folders(folder.resolve())
        self._initial = self._take(found)

    def add_root(self, folder: Path) -> None:
        """A folder added beside the repository: its files come with the first call that reaches it."""
        with self._lock:
            if folder.resolve() not in self._roots:
                self._roots.append(folder.resolve())

    @property
    def files(self) -> list[InstructionFile]:
        with self._lock:
            return list(self._files)

    @property
    def used(self) -> int:
        return self.budget - self._left

    def prompt_text(self) -> str:
        """The user's, the root's and the start folders' instructions, for the system prompt."""
        return self._initial

    def for_paths(self, paths: list[str]) -> str:
        """The instructions of folders first reached through `paths` (relative to the root), or ''."""
        found: list[tuple[Path, str, str]] = []
        with self._lock:
            for rel in paths:
                target = (self.root / rel).resolve()
                folder = target if target.is_dir() else target.parent
                if any(folder.is_relative_to(r) for r in self._roots):
                    found += self._folders(folder)
        return self._take(found)

    # --- ToolHooks: a folder a call reaches brings its instructions along ---------------------------------

    def before_tool(self, call: ToolCall, ctx: ToolContext, site: Site) -> tuple[ToolCall, ToolContext]:
        return call, ctx

    def after_tool(self, call: ToolCall, result: ToolResult, ctx: ToolContext, site: Site) -> ToolResult:
        paths = [*_call_paths(call), *result.files_touched]
        extra = self.for_paths(paths) if paths else ""
        if not extra:
            return result
        return replace(result, content=f"{result.content}\n\n{extra}")

    # --- pieces --------------------------------------------------------------------------------------------

    def _initial_files(self, user_dir: Path, cwd: Path) -> list[tuple[Path, str, str]]:
        out: list[tuple[Path, str, str]] = []
        user = user_dir / "AGENTS.md"
        if user.is_file():
            out.append((user, _home_label(user), "user"))
        self._seen.add(self.root)
        own = _own_file(self.root)
        if own is not None:
            out.append((own, own.name, "root"))
        if cwd.is_relative_to(self.root) and cwd != self.root:
            out += self._folders(cwd)
        return out

    def _folders(self, folder: Path) -> list[tuple[Path, str, str]]:
        """Files of `folder` and its parents below its root not looked at yet, outermost first (an added
        folder's own file too)."""
        holders = [r for r in self._roots if folder.is_relative_to(r)]
        top = max(holders, key=lambda r: len(r.parts), default=self.root)
        chain = [folder, *folder.parents]
        below = [d for d in chain if d.is_relative_to(top) and (d != self.root)]
        out = []
        for d in reversed(below):
            if d in self._seen:
                continue
            self._seen.add(d)
            own = _own_file(d)
            if own is not None:
                label = Path(os.path.relpath(own, self.root)).as_posix()
                out.append((own, label, "added" if d == top and top != self.root else "folder"))
        return out

    def _take(self, found: list[tuple[Path, str, str]]) -> str:
        """Read `found` in order into what is left of the budget; the text for the workers."""
        parts: list[str] = []
        with self._lock:
            for path, label, level in found:
                try:
                    text = path.read_text(encoding="utf-8", errors="replace").strip()
                except OSError:
                    continue
                size = tokens(text)
                given = text if size <= self._left else text[: max(self._left, 0) * 4]
                used = tokens(given) if given else 0
                self._files.append(InstructionFile(path, label, level, size, used))
                self._left -= used
                if given:
                    parts.append(_section(label, level, given, cut=used < size))
        return "\n\n".join(parts)


def _own_file(folder: Path) -> Path | None:
    for name in NAMES:
        path = folder / name
        if path.is_file():
            return path
    return None


def _section(label: str, level: str, text: str, *, cut: bool) -> str:
    where = {
        "user": "the user's own instructions, for every repository",
        "root": "the repository's instructions",
        "folder": f"instructions for the files under {label.rsplit('/', 1)[0]}/",
        "added": f"instructions for the folder {label.rsplit('/', 1)[0]}/, added beside the repository",
    }[level]
    tail = "\n[... cut: the instruction files' budget is spent]" if cut else ""
    return f"Instructions from {label} ({where}):\n{text}{tail}"


def _home_label(path: Path) -> str:
    try:
        return "~/" + path.relative_to(Path.home()).as_posix()
    except ValueError:
        return str(path)


def _call_paths(call: ToolCall) -> list[str]:
    try:
        args: Any = json.loads(call.arguments or "{}")
    except ValueError:
        return []
    if not isinstance(args, dict):
        return []
    return [v for k, v in args.items() if k in _PATH_ARGS and isinstance(v, str) and v]
