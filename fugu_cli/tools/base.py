"""What every tool function receives: the call's context, the permission gate, path checks and output caps.

Shared by files, search, shell and git tools; knows nothing about schemas or dispatch (that is registry.py).
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fugu_cli.errors import PathOutsideRepoError, ToolArgumentError
from fugu_cli.tools import ApprovalRequest, Part, ToolContext, ToolKind
from fugu_cli.types import Image, WorkerUsage


class ToolFailed(ToolArgumentError):
    """A tool call that ran into a problem the model can fix (missing file, no match, not a repo)."""


class PermissionDenied(Exception):
    """The policy or the user refused; the registry turns it into a denied result."""


_HOW_TO_ALLOW = {
    "edit": "run with --permission-mode auto-edit|full-auto or approve it",
    "exec": "run with --permission-mode full-auto or approve it",
    "read": "approve it",
    "web": "add the host to [web] allow in the config (a private address must be named there), or approve it",
}


@dataclass
class Invocation:
    """One tool call in flight: the tool reports files touched and exit codes here."""

    ctx: ToolContext
    tool: str
    kind: ToolKind
    files_touched: list[str] = field(default_factory=list)
    exit_code: int | None = None
    spent: tuple[tuple[str, WorkerUsage], ...] = ()  # what a subagent cost (the task tool)
    images: list[Image] = field(default_factory=list)  # for the worker, beside the text result
    _checkpointed: bool = False

    @property
    def root(self) -> Path:
        return self.ctx.root.resolve()

    def gate(self, parts: Sequence[str | Part], summary: str, detail: str) -> None:
        """Ask the policy (and the user, where it says "ask") for every part; raise if refused."""
        checked = [p if isinstance(p, Part) else Part(p) for p in parts]
        prefixes = list(dict.fromkeys(p.prefix for p in checked))
        verdicts = {p.prefix: self.ctx.policy.check(self.kind, p.prefix, p.opaque) for p in checked}
        decisions = [verdicts[p] for p in prefixes]
        if (
            self.ctx.leave_plan is not None
            and self.ctx.policy.mode == "read-only"
            and "allow" not in decisions
        ):
            raise PermissionDenied(
                f"Permission denied: {summary} (plan mode: change nothing until the user approves your plan; "
                "call exit_plan_mode with it)"
            )
        if "deny" in decisions or ("ask" in decisions and self.ctx.approve is None):
            refused = [p for p in checked if verdicts[p.prefix] != "allow"]
            raise PermissionDenied(
                f"Permission denied: {summary} ({_why(refused, verdicts)}; {_HOW_TO_ALLOW[self.kind]})"
            )
        if "ask" not in decisions or self.ctx.approve is None:
            return
        asked = [p for p, d in zip(prefixes, decisions, strict=True) if d == "ask"]
        request = ApprovalRequest(
            agent=self.ctx.agent,
            tool=self.tool,
            kind=self.kind,
            summary=summary,
            detail=detail,
            prefix=", ".join(asked),
        )
        answer = self.ctx.approve(request)
        if answer == "always":
            for p in asked:
                if self.ctx.grant is not None:
                    self.ctx.grant(p)
        elif answer != "yes":
            raise PermissionDenied(
                f"Permission denied: the user declined {summary}. Do not retry the same call; "
                "ask the user what to do instead, or try a different approach."
            )

    def before_write(self) -> None:
        """Let the session checkpoint the tree right before this call first changes anything."""
        if not self._checkpointed and self.ctx.before_edit is not None:
            self._checkpointed = True
            self.ctx.before_edit()

    def after_write(self) -> None:
        """Once the call is over: if it may have changed the tree, let the session checkpoint the result."""
        if self._checkpointed and self.ctx.after_edit is not None:
            self.ctx.after_edit(self.ctx.call_id, self.tool)

    def touched(self, path: str) -> None:
        if path not in self.files_touched:
            self.files_touched.append(path)

    def resolve(self, path: str) -> Path:
        """`path` inside the repository, or in a folder added beside it (relative paths are the root's)."""
        try:
            return resolve_in_root(self.root, path)
        except PathOutsideRepoError:
            if not self.ctx.dirs:
                raise
            target = Path(os.path.expanduser(path))
            resolved = (target if target.is_absolute() else self.root / target).resolve()
            if any(resolved.is_relative_to(d) for d in self.ctx.dirs):
                return resolved
            added = ", ".join(str(d) for d in self.ctx.dirs)
            raise PathOutsideRepoError(
                f"{path} resolves to {resolved}, outside the repository {self.root} and the folders added "
                f"beside it ({added})."
            ) from None

    def rel(self, path: Path) -> str:
        """How a path is shown: relative to the root (`../lib/x.py` for a folder added beside it)."""
        if path.is_relative_to(self.root):
            return path.relative_to(self.root).as_posix() or "."
        return Path(os.path.relpath(path, self.root)).as_posix()

    def inner(self, path: Path) -> str:
        """`path` relative to the root or added folder that holds it (what protection rules look at)."""
        for top in (self.root, *self.ctx.dirs):
            if path.is_relative_to(top):
                return path.relative_to(top).as_posix() or "."
        return self.rel(path)


def _why(refused: list[Part], verdicts: Mapping[str, str]) -> str:
    denied = list(dict.fromkeys(p.prefix for p in refused if verdicts[p.prefix] == "deny"))
    unseen = [p.prefix for p in refused if p.opaque]
    what = ", ".join(denied or list(dict.fromkeys(p.prefix for p in refused)))
    why = f"the user did not allow {what}" + ("" if denied else "; there is no terminal to ask")
    if unseen:
        why += (
            "; part of the command is only known when it runs (a command name from $(...) or a variable, "
            "a shell reading stdin, or syntax the rule parser cannot read), so no prefix rule can allow it: "
            "write the command out plainly"
        )
    return why


def resolve_in_root(root: Path, path: str) -> Path:
    """The absolute, symlink-free form of `path` (relative to `root`); refuse anything outside `root`."""
    if not path or "\x00" in path:
        raise ToolArgumentError("path must be a non-empty string without NUL bytes")
    root = root.resolve()
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        candidate = root / candidate
    if "\\x" in path and not os.path.lexists(candidate):
        candidate = Path(_unescape(str(candidate)))  # a name the tools showed escaped ("caf\xe9.txt")
    resolved = candidate.resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise PathOutsideRepoError(
            f"{path} resolves to {resolved}, outside the repository {root}. "
            "Use a path inside the repository (relative paths are relative to its root)."
        )
    return resolved


def _unescape(shown: str) -> str:
    """Undo `textio.shown`: `\\xNN` (NN >= 80) back to the undecodable byte it stood for."""
    return re.sub(r"\\x([89a-f][0-9a-f])", lambda m: chr(0xDC00 + int(m.group(1), 16)), shown)


def cap_text(text: str, cap: int) -> str:
    """Keep the head and tail of `text` within about `cap` characters, saying how much was cut."""
    if cap <= 0 or len(text) <= cap:
        return text
    half = cap // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[len(text) - half :]}"


DIFF_MAX_CHARS = 1_000_000  # a whole-file diff past this is summarised (difflib would take minutes)
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", re.MULTILINE)
_TOO_BIG = re.compile(r"^\[whole-file diff not shown: -(\d+) \+(\d+) lines", re.MULTILINE)


def unified_diff(rel: str, old: str | None, new: str, first_line: int = 1) -> str:
    """A `git diff`-style patch of one file; `old=None` means the file is new.

    `old` and `new` may be a window of the file starting at line `first_line` (the rest being equal).
    """
    a = "/dev/null" if old is None else f"a/{rel}"
    if len(old or "") + len(new) > DIFF_MAX_CHARS:
        counts = f"-{len((old or '').splitlines())} +{len(new.splitlines())} lines"
        return f"--- {a}\n+++ b/{rel}\n[whole-file diff not shown: {counts}, {len(new)} characters]\n"
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=a,
        tofile=f"b/{rel}",
    )
    diff = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    if first_line == 1:
        return diff

    def shift(m: re.Match[str]) -> str:
        a_start, c_start = int(m.group(1)) + first_line - 1, int(m.group(3)) + first_line - 1
        return f"@@ -{a_start}{m.group(2) or ''} +{c_start}{m.group(4) or ''} @@"

    return _HUNK.sub(shift, diff)


def diff_counts(diff: str) -> tuple[int, int]:
    """(+added, -removed) line counts of a unified diff."""
    if summary := _TOO_BIG.search(diff):
        return int(summary.group(2)), int(summary.group(1))
    added = removed = 0
    in_hunk = False
    for line in diff.splitlines():
        if line.startswith("@@"):
            in_hunk = True
        elif in_hunk and line.startswith("+"):
            added += 1
        elif in_hunk and line.startswith("-"):
            removed += 1
    return added, removed


def elapsed_ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0
