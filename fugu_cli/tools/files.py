"""File tools: read_file, write_file, edit_file.

Every path goes through `Invocation.resolve` (inside the repo or refused; `read_file` may also read a kept
full output under FUGU_HOME); edits show their diff to the permission gate before anything is written, change
only the bytes they mean to, and land atomically. FIFOs, sockets and devices are refused.
"""

from __future__ import annotations

from pathlib import Path

from fugu_cli.errors import PathOutsideRepoError
from fugu_cli.tools import PROTECTED_PREFIX, protected
from fugu_cli.tools.base import Invocation, ToolFailed, diff_counts, unified_diff
from fugu_cli.tools.images import load_image, looks_like_image
from fugu_cli.tools.output import default_output_dir, is_output_file
from fugu_cli.tools.textio import Decoded, atomic_write, check_writable, decode, read_bytes, shown

MAX_LINES = 2000
MAX_LINE_CHARS = 2000


def read_file(
    inv: Invocation,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
    offset: int | None = None,
    limit: int | None = None,
) -> str:
    """Read a text file from the repository, with line numbers (like `cat -n`).

    Long files are returned 2000 lines at a time; use offset/limit (or start_line/end_line) to read other
    parts. Also reads the full output of a cut tool result, at the path its note gives. An image file (PNG,
    JPEG, GIF, WebP) is shown to you as an image when you can see images.

    Args:
        path: File path, relative to the repository root.
        start_line: First line to read (1-based, inclusive). Default: 1.
        end_line: Last line to read (1-based, inclusive). Default: the end of the file (capped).
        offset: Same as start_line: the first line to read (1-based).
        limit: How many lines to read from there.
    """
    if offset is not None and start_line is not None and offset != start_line:
        raise ToolFailed("give offset or start_line, not both (they mean the same: the first line).")
    target = _readable(inv, path)
    if looks_like_image(target):
        image = load_image(target, path)
        inv.images.append(image)
        return f"{path} is an image ({image.media_type}, {image.size:,} bytes); it is attached below."
    decoded = decode(read_bytes(target, path), path)
    lines = decoded.text.splitlines()
    total = len(lines)
    if total == 0:
        return f"{path} is empty (0 lines)."
    start = offset if offset is not None else (start_line if start_line is not None else 1)
    if start < 1:
        raise ToolFailed(f"the first line must be >= 1 (got {start}); lines are numbered from 1.")
    if start > total:
        raise ToolFailed(f"line {start} is past the end of {path}, which has {total} lines.")
    if limit is not None and limit < 1:
        raise ToolFailed(f"limit must be at least 1 (got {limit}).")
    end = total if end_line is None else min(end_line, total)
    if limit is not None:
        end = min(end, start + limit - 1)
    if end < start:
        raise ToolFailed(f"end_line ({end_line}) is before the first line ({start}).")
    return _numbered(lines, start, end, total, inv.ctx.output_cap, decoded.note)


def _numbered(lines: list[str], start: int, end: int, total: int, cap: int, note: str) -> str:
    stop = min(end, start + MAX_LINES - 1)
    budget = max(cap - 300, 1000)
    out: list[str] = [f"[{note}]"] if note else []
    used = 0
    last = start - 1
    for number in range(start, stop + 1):
        line = shown(lines[number - 1])
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} characters cut]"
        row = f"{number:6}\t{line}"
        if last >= start and used + len(row) + 1 > budget:
            break
        out.append(row)
        used += len(row) + 1
        last = number
    if last < end:
        out.append(
            f"[showing lines {start}-{last} of {total}; call read_file with offset={last + 1} to read more]"
        )
    return "\n".join(out)


def _readable(inv: Invocation, path: str) -> Path:
    try:
        return inv.resolve(path)
    except PathOutsideRepoError:
        if is_output_file(Path(path), inv.ctx.output_dir or default_output_dir()):
            return Path(path).resolve()
        raise


def write_file(inv: Invocation, path: str, content: str) -> str:
    """Create a file, or replace the whole content of an existing one. Creates parent directories.

    To change part of an existing file, prefer edit_file: it is safer and shows a smaller diff.

    Args:
        path: File path, relative to the repository root.
        content: The complete new content of the file.
    """
    target = inv.resolve(path)
    rel = _writable(inv, target)
    own = inv.inner(target)
    old = decode(read_bytes(target, path), path) if target.exists() else None
    data = (old or Decoded("")).encode(content, rel)
    diff = unified_diff(rel, shown(old.text) if old else None, shown(content))
    added, removed = diff_counts(diff)
    if old is None:
        summary = f"create {rel} ({len(content.splitlines())} lines)"
    else:
        summary = f"write {rel} (+{added} -{removed}{_note(old)})"
    inv.gate(_edit_parts(rel, own), summary, diff)
    inv.before_write()
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, data)
    inv.touched(rel)
    if old is not None and old.text == content:
        return f"{rel} already had this content; nothing changed."
    if old is None:
        return _checked(inv, target, f"Created {rel} (+{len(content.splitlines())} lines).")
    return _checked(inv, target, f"Updated {rel} (+{added} -{removed}{_note(old)}).\n{diff}")


def edit_file(inv: Invocation, path: str, old_text: str, new_text: str) -> str:
    """Replace one exact occurrence of old_text with new_text in a file; returns the unified diff.

    old_text must match the file exactly (whitespace and indentation included) and occur exactly once:
    include enough surrounding lines to make it unique. Read the file first if unsure of its content.

    Args:
        path: File path, relative to the repository root.
        old_text: The exact text to replace; must occur exactly once in the file.
        new_text: The text to put in its place (may be empty to delete old_text).
    """
    target = inv.resolve(path)
    rel = _writable(inv, target)
    if not target.exists():
        raise ToolFailed(f"{path} does not exist. Use write_file to create a new file.")
    decoded = decode(read_bytes(target, path), path)
    old = decoded.text
    if not old_text:
        raise ToolFailed("old_text is empty. Give the exact text to replace (use write_file for new files).")
    if old_text == new_text:
        raise ToolFailed("old_text and new_text are identical; there is nothing to change.")
    count = old.count(old_text)
    if count == 0:
        raise ToolFailed(_not_found_message(rel, old, old_text))
    if count > 1:
        lines = _match_lines(old, old_text)
        raise ToolFailed(
            f"old_text occurs {count} times in {rel} (starting at lines {', '.join(map(str, lines))}). "
            "Include more surrounding lines in old_text so that it matches exactly once."
        )
    new = old.replace(old_text, new_text, 1)
    data = decoded.encode(new, rel)
    diff = _edit_diff(rel, old, new, old.index(old_text), old_text)
    added, removed = diff_counts(diff)
    inv.gate(_edit_parts(rel, inv.inner(target)), f"edit {rel} (+{added} -{removed}{_note(decoded)})", diff)
    inv.before_write()
    atomic_write(target, data)
    inv.touched(rel)
    return _checked(inv, target, f"Edited {rel} (+{added} -{removed}{_note(decoded)}).\n{diff}")


def _checked(inv: Invocation, target: Path, result: str) -> str:
    """The edit's result, followed by what the `[checks]` found in the edited file."""
    from fugu_cli.tools.checks import after_edit

    report = after_edit(inv, [target])
    return f"{result}\n\n{report}" if report else result


def _edit_diff(rel: str, old: str, new: str, at: int, old_text: str) -> str:
    """The diff of one replacement, computed on the lines around it (a big file is not diffed whole)."""
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    first = old.count("\n", 0, at)
    last = first + old_text.count("\n") + 1
    lo, hi = max(0, first - 3), min(len(old_lines), last + 3)
    hi_new = hi + len(new_lines) - len(old_lines)
    window_old, window_new = "".join(old_lines[lo:hi]), "".join(new_lines[lo:hi_new])
    return unified_diff(rel, shown(window_old), shown(window_new), first_line=lo + 1)


def _edit_parts(rel: str, own: str) -> list[str]:
    """What an edit of `rel` needs allowed: "edit", and the file itself when it configures what runs (`own`:
    its path in the repository or added folder that holds it)."""
    return ["edit", f"{PROTECTED_PREFIX}{rel}"] if protected(own) else ["edit"]


def _note(decoded: Decoded) -> str:
    return f", {decoded.note}" if decoded.note else ""


def _writable(inv: Invocation, target: Path) -> str:
    rel, own = inv.rel(target), inv.inner(target)
    if own == "." or target.is_dir():
        raise ToolFailed(f"{rel} is a directory; give a file path.")
    if own == ".git" or own.startswith(".git/"):
        raise ToolFailed("Files inside .git cannot be written with file tools; use git commands instead.")
    check_writable(target, rel)
    return rel


def _match_lines(text: str, needle: str) -> list[int]:
    lines: list[int] = []
    start = text.find(needle)
    while start != -1 and len(lines) < 10:
        lines.append(text.count("\n", 0, start) + 1)
        start = text.find(needle, start + 1)
    return lines


def _not_found_message(rel: str, text: str, old_text: str) -> str:
    """Point the model at where it probably meant, so the retry can succeed."""
    lines = text.splitlines()
    wanted = [ln.strip() for ln in old_text.splitlines() if ln.strip()]
    base = f"old_text was not found in {rel}."
    if not wanted:
        return base + " It contains only whitespace; give the exact text to replace."
    stripped = [ln.strip() for ln in lines]
    for i in range(len(lines)):
        if stripped[i : i + len(wanted)] == wanted:
            return (
                f"{base} It matches at line {i + 1} if whitespace is ignored: copy the exact indentation "
                f"from these lines:\n{_excerpt(lines, i, i + len(wanted))}"
            )
    for i, line in enumerate(stripped):
        if line == wanted[0]:
            return (
                f"{base} Its first line appears at line {i + 1}, but the following lines differ. "
                f"The file around there:\n{_excerpt(lines, i, i + len(wanted) + 2)}"
            )
    return base + " Read the file again (read_file) and copy old_text exactly."


def _excerpt(lines: list[str], start: int, stop: int) -> str:
    lo, hi = max(0, start - 2), min(len(lines), stop + 2)
    return "\n".join(f"{n + 1:6}\t{lines[n]}" for n in range(lo, hi))
