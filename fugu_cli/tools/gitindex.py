"""Reading a git index file without git: which paths are submodule entries (gitlinks).

Versions 2, 3 and 4 (path prefix compression), SHA-1 and SHA-256, and a split index's shared part. Used by
the sandbox's git guard after a command, where starting git (and so reading the repository's config) is
what must not happen. Reads bytes only; a file it cannot parse is a ValueError.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

_GITLINK = 0o160000
_TYPE_MASK = 0o170000
_EXTENDED = 0x4000


def hash_size(git_dir: Path) -> int:
    """Bytes per object id in the repository whose (common) git directory is `git_dir`."""
    try:
        config = (git_dir / "config").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 20
    return 32 if re.search(r"(?im)^\s*objectformat\s*=\s*sha256\s*$", config) else 20


def gitlinks(index: Path, hash_size: int = 20, shared_dir: Path | None = None) -> set[str]:
    """The paths of the gitlink entries in `index` (and in the shared index a split index names)."""
    data = index.read_bytes()
    found, shared = _parse(data, hash_size)
    if shared is not None and shared_dir is not None:
        shared_file = shared_dir / f"sharedindex.{shared}"
        found |= _parse(shared_file.read_bytes(), hash_size)[0]
    return found


def _parse(data: bytes, hash_size: int) -> tuple[set[str], str | None]:
    if len(data) < 12 + hash_size or data[:4] != b"DIRC":
        raise ValueError("not a git index")
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        raise ValueError(f"index version {version}")
    fixed = 40 + hash_size + 2  # stat fields, mode..size, the object id, flags
    pos, previous, found = 12, b"", set()
    end = len(data) - hash_size
    for _ in range(count):
        if pos + fixed > end:
            raise ValueError("index entries run past the end")
        (mode,) = struct.unpack(">I", data[pos + 24 : pos + 28])
        (flags,) = struct.unpack(">H", data[pos + fixed - 2 : pos + fixed])
        header = fixed + (2 if version >= 3 and flags & _EXTENDED else 0)
        start = pos + header
        if version == 4:
            strip, start = _varint(data, start)
            stop = data.index(b"\0", start)
            if strip > len(previous):
                raise ValueError("bad path compression")
            name = previous[: len(previous) - strip] + data[start:stop]
            pos = stop + 1
        else:
            stop = data.index(b"\0", start)
            name = data[start:stop]
            pos += (header + len(name) + 8) & ~7
        previous = name
        if mode & _TYPE_MASK == _GITLINK:
            found.add(name.decode("utf-8", "surrogateescape"))
    return found, _shared(data, pos, end, hash_size)


def _shared(data: bytes, pos: int, end: int, hash_size: int) -> str | None:
    """The object id a split index's `link` extension names, if it has one."""
    while pos + 8 <= end:
        signature, size = data[pos : pos + 4], struct.unpack(">I", data[pos + 4 : pos + 8])[0]
        if signature == b"link":
            return data[pos + 8 : pos + 8 + hash_size].hex()
        pos += 8 + size
    return None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    c = data[pos]
    pos += 1
    value = c & 127
    while c & 128:
        c = data[pos]
        pos += 1
        value = ((value + 1) << 7) | (c & 127)
    return value, pos
