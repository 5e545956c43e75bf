"""File tools: read_file, write_file, edit_file.

Every path goes through `Invocation.resolve` (inside the repo or refused); edits show their diff to the
permission gate before anything is written.
"""

from __future__ import annotations

from pathlib import Path

from fugu_cli.tools.base import Invocation, ToolFailed, diff_counts, unified_diff

MAX_LINES = 2000
MAX_LINE_CHARS = 2000
_BINARY_SAMPLE = 8192


def read_file(inv: Invocation, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Read a text file from the repository, with line numbers (like `cat -n`).

    Long files are returned 2000 lines at a time; use start_line/end_line to read other parts.

    Args:
        path: File path, relative to the repository root.
        start_line: First line to read (1-based, inclusive). Default: 1.
        end_line: Last line to read (1-based, inclusive). Default: the end of the file (capped).
    """
    target = inv.resolve(path)
    text = _read_text(target, path)
    lines = text.splitlines()
    total = len(lines)
    if total == 0:
        return f"{path} is empty (0 lines)."
    start = start_line if start_line is not None else 1
    if start < 1:
        raise ToolFailed(f"start_line must be >= 1 (got {start}); lines are numbered from 1.")
    if start > total:
        raise ToolFailed(f"start_line {start} is past the end of {path}, which has {total} lines.")
    end = min(end_line, total) if end_line is not None else total
    if end < start:
        raise ToolFailed(f"end_line ({end_line}) is before start_line ({start}).")
    stop = min(end, start + MAX_LINES - 1)
    budget = max(inv.ctx.output_cap - 200, 1000)
    out: list[str] = []
    used = 0
    last = start - 1
    for number in range(start, stop + 1):
        line = lines[number - 1]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} characters cut]"
        row = f"{number:6}\t{line}"
        if out and used + len(row) + 1 > budget:
            break
        out.append(row)
        used += len(row) + 1
        last = number
    if last < end:
        out.append(
            f"[showing lines {start}-{last} of {total}; call read_file with start_line={last + 1} "
            "to read more]"
        )
    return "\n".join(out)


def write_file(inv: Invocation, path: str, content: str) -> str:
    """Create a file, or replace the whole content of an existing one. Creates parent directories.

    To change part of an existing file, prefer edit_file: it is safer and shows a smaller diff.

    Args:
        path: File path, relative to the repository root.
        content: The complete new content of the file.
    """
    target = inv.resolve(path)
    rel = _writable(inv, target)
    old = _read_text(target, path) if target.exists() else None
    diff = unified_diff(rel, old, content)
    added, removed = diff_counts(diff)
    if old is None:
        summary = f"create {rel} ({len(content.splitlines())} lines)"
    else:
        summary = f"write {rel} (+{added} -{removed})"
    inv.gate(["edit"], summary, diff)
    inv.before_write()
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_text(target, content)
    inv.touched(rel)
    if old is None:
        return f"Created {rel} (+{len(content.splitlines())} lines)."
    if old == content:
        return f"{rel} already had this content; nothing changed."
    return f"Updated {rel} (+{added} -{removed}).\n{diff}"


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
    old = _read_text(target, path)
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
    diff = unified_diff(rel, old, new)
    added, removed = diff_counts(diff)
    inv.gate(["edit"], f"edit {rel} (+{added} -{removed})", diff)
    inv.before_write()
    _write_text(target, new)
    inv.touched(rel)
    return f"Edited {rel} (+{added} -{removed}).\n{diff}"


def _writable(inv: Invocation, target: Path) -> str:
    rel = inv.rel(target)
    if rel == "." or target.is_dir():
        raise ToolFailed(f"{rel} is a directory; give a file path.")
    if rel == ".git" or rel.startswith(".git/"):
        raise ToolFailed("Files inside .git cannot be written with file tools; use git commands instead.")
    return rel


def _read_text(target: Path, shown: str) -> str:
    if not target.exists():
        raise ToolFailed(f"{shown} does not exist. Use glob to find files.")
    if target.is_dir():
        raise ToolFailed(f"{shown} is a directory, not a file. Use glob (e.g. '{shown}/*') to list it.")
    data = target.read_bytes()
    if b"\x00" in data[:_BINARY_SAMPLE]:
        raise ToolFailed(f"{shown} is a binary file ({len(data)} bytes); it cannot be shown as text.")
    # newline="" semantics: keep \r\n as it is so edits do not rewrite line endings.
    return data.decode("utf-8", errors="replace")


def _write_text(target: Path, content: str) -> None:
    target.write_bytes(content.encode("utf-8"))


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
