"""Images for the workers: a file (or bytes) recognised as PNG, JPEG, GIF or WebP by its first bytes, bounded
in size, as an `Image` value; and the images a prompt names (`@shot.png`, a pasted path, a `file://` URL).

Reads files only; decides nothing about who may see an image (the agent masks workers that cannot).
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import stat
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse

from fugu_cli.errors import ToolArgumentError
from fugu_cli.types import Image

MAX_IMAGE_BYTES = 5 * 1024 * 1024  # the most a provider takes for one image (Anthropic's limit)
SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
_MENTION = re.compile(r"(?<!\S)@(\S+)")


class NotAnImage(ToolArgumentError):
    """A file that is not a picture fugu can send, or one too large to send."""


def media_type(data: bytes) -> str | None:
    """The image type the bytes start with, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def looks_like_image(path: Path) -> bool:
    """Whether `path` is a regular file whose first bytes are a picture's (whatever its name); a FIFO or a
    device is never opened."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with path.open("rb") as f:
            return media_type(f.read(16)) is not None
    except OSError:
        return False


def image_of(data: bytes, name: str) -> Image:
    """`data` as an Image, or NotAnImage saying why not."""
    kind = media_type(data[:16])
    if kind is None:
        raise NotAnImage(f"{name} is not a PNG, JPEG, GIF or WebP image")
    if len(data) > MAX_IMAGE_BYTES:
        raise NotAnImage(
            f"{name} is {len(data) / 1e6:.1f} MB; images up to {MAX_IMAGE_BYTES // (1024 * 1024)} MiB can "
            "be sent (shrink it first)"
        )
    return Image(kind, base64.b64encode(data).decode("ascii"), name)


def load_image(path: Path, name: str | None = None) -> Image:
    """The image file at `path` (named `name` in the transcript)."""
    label = name or path.name
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise NotAnImage(f"{label} is not a regular file")
        if info.st_size > MAX_IMAGE_BYTES:
            raise NotAnImage(
                f"{label} is {info.st_size / 1e6:.1f} MB; images up to "
                f"{MAX_IMAGE_BYTES // (1024 * 1024)} MiB can be sent (shrink it first)"
            )
        data = path.read_bytes()
    except OSError as e:
        raise NotAnImage(f"cannot read {label}: {e.strerror or e}") from None
    return image_of(data, label)


def prompt_images(text: str, roots: Sequence[Path]) -> tuple[list[Image], list[str]]:
    """The images a prompt names, and a line for each named one that cannot be sent: `@path` relative to
    one of `roots` (the repository, then folders added with --add-dir), and a path or `file://` URL pasted
    into the prompt (a terminal pastes a dragged file so, quoted or with escaped spaces)."""
    found: dict[Path, str] = {}
    for match in _MENTION.finditer(text):
        rel = match.group(1).rstrip(".,;:!?)")
        if rel.lower().endswith(SUFFIXES):
            for root in roots:
                path = (root / rel).resolve()
                if path.is_file() and any(path.is_relative_to(r.resolve()) for r in roots):
                    found.setdefault(path, rel)
                    break
    for word in _words(text):
        pasted = _pasted(word)
        if pasted is not None and pasted.lower().endswith(SUFFIXES) and os.path.isfile(pasted):
            found.setdefault(Path(pasted).resolve(), pasted)
    images: list[Image] = []
    problems: list[str] = []
    for path, label in found.items():
        try:
            images.append(load_image(path, label))
        except NotAnImage as e:
            problems.append(str(e))
    return images, problems


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, posix=True)
    except ValueError:  # an unbalanced quote: plain words
        return text.split()


def _pasted(word: str) -> str | None:
    if word.startswith("file://"):
        return unquote(urlparse(word).path)
    if word.startswith(("/", "~/")):
        return os.path.expanduser(word)
    return None
