"""Bounded tool output: head and tail within a budget, the full text kept in a file the model can read.

Every tool result passes through `bound` (via the registry); a command's output streams into a `Capture`
so memory stays bounded however much it prints. Full outputs live under FUGU_HOME/tool-output, redacted;
`read_file` may read them (and nothing else outside the repository). Never decides what a tool does.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

from fugu_cli.redact import redact

MAX_SPILL_BYTES = 64 * 1024 * 1024  # a runaway command's full output stops being kept past this
KEEP_DAYS = 7
_pruned: set[Path] = set()
_prune_lock = threading.Lock()


def default_output_dir() -> Path:
    from fugu_cli.config import fugu_home

    return fugu_home() / "tool-output"


def is_output_file(path: Path, out_dir: Path) -> bool:
    """Whether `path` is a kept output in `out_dir`: the one place outside the repo that reads may go."""
    try:
        resolved, top = path.resolve(), out_dir.resolve()
    except OSError:
        return False
    return resolved.parent == top and resolved.suffix == ".log" and resolved.is_file()


def _new_file(out_dir: Path, label: str) -> tuple[int, Path]:
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    _prune_once(out_dir)
    fd, name = tempfile.mkstemp(
        prefix=time.strftime("%Y%m%d-%H%M%S-") + label + "-", suffix=".log", dir=out_dir
    )
    return fd, Path(name)


def _prune_once(out_dir: Path) -> None:
    with _prune_lock:
        if out_dir in _pruned:
            return
        _pruned.add(out_dir)
    cutoff = time.time() - KEEP_DAYS * 86400
    for old in out_dir.glob("*.log"):
        try:
            if old.stat().st_mtime < cutoff:
                old.unlink()
        except OSError:
            pass


def _cut_note(cut_chars: int, first_line: int, last_line: int, total_lines: int, where: Path | None) -> str:
    lines = (
        f"lines {first_line}-{last_line} of {total_lines}" if last_line >= first_line else "part of a line"
    )
    if where is None:
        return f"[... {cut_chars} characters cut ({lines}) ...]"
    return (
        f"[... {cut_chars} characters cut ({lines}). The full output is in {where}: read the rest with "
        f"read_file(path={str(where)!r}, offset={max(first_line, 1)}, limit=200), or grep it ...]"
    )


def bound(text: str, cap: int, out_dir: Path | None, label: str = "tool") -> str:
    """`text` if it fits in `cap` characters; else head and tail, a note of the cut, all of it in a file."""
    if cap <= 0 or len(text) <= cap:
        return text
    half = max(cap // 2 - 200, 100)
    head, tail = text[:half], text[len(text) - half :]
    where: Path | None = None
    if out_dir is not None:
        try:
            fd, where = _new_file(out_dir, label)
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
        except OSError:
            where = None
    first = head.count("\n") + 1
    total = text.count("\n") + 1
    last = total - tail.count("\n")
    return f"{head}\n{_cut_note(len(text) - 2 * half, first + 1, last - 1, total, where)}\n{tail}"


class Capture:
    """A byte sink for a running command: keeps the first and last `cap` bytes, and spills all to a file.

    `text()` gives the bounded, decoded, redacted output, naming the file that holds all of it.
    """

    def __init__(self, cap: int, out_dir: Path | None, label: str = "shell") -> None:
        self.cap = max(cap, 400)
        self.out_dir, self.label = out_dir, label
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.lines = 0
        self.path: Path | None = None
        self._file: int | None = None
        self._spilled = 0

    def __call__(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.lines += chunk.count(b"\n")
        if self.total > self.cap:
            self._spill(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk[max(room, 0) :]
        if len(self.tail) > 2 * self.cap:
            del self.tail[: len(self.tail) - self.cap]

    def _spill(self, chunk: bytes) -> None:
        if self.out_dir is None or self._spilled >= MAX_SPILL_BYTES:
            return
        try:
            if self._file is None:
                # the first chunk past the cap: everything before it is still in the head
                self._file, self.path = _new_file(self.out_dir, self.label)
                chunk = bytes(self.head) + chunk
            data = chunk[: MAX_SPILL_BYTES - self._spilled]
            os.write(self._file, data)
            self._spilled += len(data)
        except OSError:
            self.path = None

    def close(self) -> None:
        """Finish the file: redact it (secrets never rest in FUGU_HOME in the clear)."""
        if self._file is None:
            return
        os.close(self._file)
        self._file = None
        if self.path is not None:
            _redact_file(self.path)

    def text(self) -> str:
        self.close()
        if self.total <= self.cap:
            return redact(_decode(bytes(self.head))).rstrip("\n")
        half = self.cap // 2
        head = bytes(self.head[:half])
        tail = bytes(self.tail[-half:])
        first = head.count(b"\n") + 1
        last = self.lines + 1 - tail.count(b"\n")
        note = _cut_note(self.total - len(head) - len(tail), first + 1, last - 1, self.lines + 1, self.path)
        if self.path is not None and self._spilled >= MAX_SPILL_BYTES:
            note += f"\n[the file keeps only the first {MAX_SPILL_BYTES // 2**20} MB]"
        return redact(f"{_decode(head)}\n{note}\n{_decode(tail)}").rstrip("\n")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _redact_file(path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        with path.open("rb") as src, tmp.open("wb") as dst:
            while block := src.read(1 << 20):
                block += src.readline()  # whole lines: a secret is not cut in two
                dst.write(redact(block.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape"))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
