"""Bytes on disk and the text tools see: lossless decoding, only regular files, atomic writes.

A file decodes so that encoding the text again gives back exactly its bytes (UTF-8, UTF-16/32 with a BOM,
a PEP 263 coding cookie, UTF-8 with stray bytes kept as surrogate escapes, else Latin-1), so an edit changes
only the bytes it means to. Writes go to a temp file in the same folder, fsync, then rename.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.tools.base import ToolFailed

MAX_READ_BYTES = 128 * 1024 * 1024
BINARY_SAMPLE = 8192
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)
_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, kept as a surrogate escape
_OTHER_NON_ASCII = re.compile("[^\x00-\x7f\udc80-\udcff]")  # a character beyond ASCII that decoded


@dataclass(frozen=True)
class Decoded:
    """A file's text and how to turn it back into the same bytes."""

    text: str
    encoding: str = "utf-8"
    errors: str = "strict"

    @property
    def note(self) -> str:
        """'' for plain UTF-8, else a few words the model and the user should see."""
        if self.encoding == "utf-8" and self.errors == "strict":
            return ""
        if self.errors == "surrogateescape":
            return "UTF-8 with some invalid bytes, kept as they are"
        return f"encoding {self.encoding}"

    def encode(self, text: str, shown: str) -> bytes:
        try:
            return text.encode(self.encoding, self.errors)
        except UnicodeEncodeError as exc:
            bad = text[exc.start : exc.end]
            raise ToolFailed(
                f"{shown} is stored as {self.encoding}, which cannot hold {bad!r}; nothing was written. "
                "Use characters that encoding has (or convert the file with a shell command first)."
            ) from exc


def describe(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def read_bytes(target: Path, shown: str) -> bytes:
    """The content of a regular file; FIFOs, sockets and devices are refused without blocking on them."""
    is_dir = f"{shown} is a directory, not a file. Use glob (e.g. '{shown}/*') to list it."
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        raise ToolFailed(f"{shown} does not exist. Use glob to find files.") from None
    if stat.S_ISDIR(mode):
        raise ToolFailed(is_dir)
    if not stat.S_ISREG(mode):
        raise ToolFailed(f"{shown} is {describe(mode)}; file tools only read regular files.")
    try:  # O_NONBLOCK: should it have become a FIFO since the stat, opening it does not wait for a writer
        fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ToolFailed(f"{shown} cannot be read: {exc.strerror}.") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailed(f"{shown} is {describe(info.st_mode)}; file tools only read regular files.")
        if info.st_size > MAX_READ_BYTES:
            raise ToolFailed(
                f"{shown} is {info.st_size // 2**20} MB, too large to read whole; use grep, or a shell "
                "command such as `sed -n '100,200p' FILE`."
            )
        os.set_blocking(f.fileno(), True)
        return f.read()


def check_writable(target: Path, shown: str) -> None:
    """Refuse to write over anything but a regular file (a FIFO would block, a device is not ours)."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        raise ToolFailed(f"{shown} is a directory; give a file path.")
    if not stat.S_ISREG(mode):
        raise ToolFailed(f"{shown} is {describe(mode)}; file tools only write regular files.")


def decode(data: bytes, shown: str) -> Decoded:
    """Text that encodes back to exactly `data`; binary files are refused."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return Decoded(data.decode(encoding), encoding)
            except UnicodeDecodeError:
                break
    if b"\x00" in data[:BINARY_SAMPLE]:
        raise ToolFailed(
            f"{shown} is a binary file ({len(data)} bytes); it cannot be shown or edited as text."
        )
    try:
        return Decoded(data.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    cookie = _COOKIE.search(b"\n".join(data.split(b"\n", 2)[:2]))
    if cookie:
        try:
            encoding = codecs.lookup(cookie.group(1).decode("ascii")).name
            text = data.decode(encoding)
            if text.encode(encoding) == data:
                return Decoded(text, encoding)
        except (LookupError, UnicodeError):
            pass
    escaped = data.decode("utf-8", "surrogateescape")
    if _OTHER_NON_ASCII.search(escaped):
        return Decoded(escaped, "utf-8", "surrogateescape")  # mostly UTF-8: keep the stray bytes as they are
    return Decoded(data.decode("latin-1"), "latin-1")


def shown(text: str) -> str:
    """Text safe to print: bytes kept as surrogate escapes appear as \\xNN."""
    if text.isascii() or not _ESCAPED.search(text):  # scanned in C: a big file's write checks every character
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _umask() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def atomic_write(target: Path, data: bytes) -> None:
    """Replace `target` with `data` so a crash at any moment leaves the old content or the new, never a mix.

    A temp file in the same folder is written and fsynced, given the old file's mode, renamed over the
    target, and the folder fsynced. A symlink's target was resolved by the caller, so links survive.
    """
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".fugu-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
