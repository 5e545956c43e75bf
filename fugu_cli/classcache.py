"""Start-up: the methods `dataclasses` writes for each class, compiled once and kept under FUGU_HOME/cache.

`dataclasses` builds a class's `__init__`, `__repr__`, `__eq__`, ... by `exec`-ing source text it generates,
compiling each from scratch: a `fugu -p` imports about 185 dataclasses (fugu's and its libraries'), about
1,000 such compilations, about 130 ms of a 720 ms launch on a 2-core machine (docs/BENCHMARKS.md).
`install()` gives the `dataclasses` module an `exec` of its own: text compiled by an earlier run of this fugu
on this Python runs from its kept code object, anything else is compiled exactly as the built-in `exec`
compiles it and kept. The key is the whole text, so a kept entry is the very code a compilation would give;
the generated functions still get the class's globals and locals from `dataclasses`, as before.

One folder per fugu version and Python bytecode version (older ones are removed when a new one is written),
in it one file per top-level package (read when that package builds its first class), written at exit when
the run compiled something new for it, replaced atomically. A missing, unreadable or corrupt file only means
compiling, as without the cache. `FUGU_CLASS_CACHE=0` turns it off.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import shutil
import sys
import threading
from pathlib import Path
from types import CodeType
from typing import Any

from fugu_cli import __version__

_lock = threading.Lock()


class _Codes:
    """The kept code, one file per top-level package whose classes were built (read on its first class), so
    a run that never imports litellm never reads litellm's entries."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.packs: dict[str, dict[str, CodeType]] = {}
        self.changed: set[str] = set()
        self.compiled = 0  # texts this run compiled (none, when every class it built was kept)

    def _pack(self, name: str) -> dict[str, CodeType]:
        pack = self.packs.get(name)
        if pack is None:
            pack = {}
            try:
                loaded = marshal.loads((self.folder / f"{name}.marshal").read_bytes())
                if isinstance(loaded, dict):
                    pack = {k: v for k, v in loaded.items() if isinstance(k, str) and isinstance(v, CodeType)}
            except (OSError, EOFError, ValueError, TypeError):
                pass  # nothing kept (yet): compile, as without the cache
            self.packs[name] = pack
        return pack

    def exec(self, source: Any, globals: Any = None, locals: Any = None, /) -> None:
        if globals is None:  # the built-in exec would take its caller's: that was dataclasses' module
            globals = vars(dataclasses)
        if isinstance(source, str):
            module = globals.get("__name__") if isinstance(globals, dict) else None
            name = module.partition(".")[0] if isinstance(module, str) else ""
            name = name if name.isidentifier() else "_"  # also the pack's file name
            with _lock:
                pack = self._pack(name)
                code = pack.get(source)
            if code is None:
                # as the built-in exec compiles text: file "<string>", none of this module's __future__ flags
                code = compile(source, "<string>", "exec", dont_inherit=True)
                with _lock:
                    pack[source] = code
                    self.changed.add(name)
                    self.compiled += 1
            source = code
        builtins.exec(source, globals, locals)

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for name in sorted(self.changed):
                path = self.folder / f"{name}.marshal"
                tmp = path.with_name(f"{name}.{os.getpid()}.tmp")
                with _lock:
                    data = marshal.dumps(self.packs[name])
                tmp.write_bytes(data)
                tmp.replace(path)
            for old in self.folder.parent.glob("classes-*"):
                if old != self.folder:
                    shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass  # not kept this time: the next run compiles again


def cache_folder(home: Path) -> Path:
    tag = importlib.util.MAGIC_NUMBER.hex()
    return home / "cache" / f"classes-{__version__}-{sys.implementation.cache_tag}-{tag}"


def install(home: Path) -> None:
    """From now on, dataclasses' generated methods come from (and go to) the cache under `home`."""
    if os.environ.get("FUGU_CLASS_CACHE", "1") == "0" or getattr(dataclasses, "exec", None) is not None:
        return
    codes = _Codes(cache_folder(home))
    dataclasses.exec = codes.exec  # type: ignore[attr-defined]  # found before the built-in one
    atexit.register(codes.save)
