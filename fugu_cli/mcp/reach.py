"""What a stdio MCP server's command needs to read, so the sandbox keeps it visible (read-only) even where
the sandbox would hide it (a private /tmp): the files its command line names and their folders, the
virtualenv a program or its interpreter lives in and that interpreter's prefix, an interpreter named by a
script's `#!` line, and for a Node package the `node_modules` it sits in (or its package folder). Nothing
else: no parent folder wider than these, never the whole of /tmp.

`npx -y PACKAGE` cannot run on a read-only npm cache (npm rewrites the cache's index as it reads it), so a
package npx has installed before is run from npx's own install of it (`~/.npm/_npx/HASH`), as npx would.
Reads file heads, `pyvenv.cfg` and package.json files; never starts anything. Never prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

_HEAD = 256  # bytes read for a `#!` line


def readable(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> list[Path]:
    """The folders `argv` needs to see, read-only, to start (found with `env`'s PATH, else fugu's)."""
    path = (env or {}).get("PATH") or os.environ.get("PATH", "")
    found: list[Path] = []
    for i, arg in enumerate(argv):
        target = _program(arg, path) if i == 0 else _existing(arg, cwd)
        if target is not None:
            found += _needs(target, path, depth=0)
    return [p for p in dict.fromkeys(found) if p != Path("/")]


def _program(command: str, path: str) -> Path | None:
    if os.sep in command:
        return _existing(command, None)
    where = shutil.which(command, path=path)
    return Path(where) if where else None


def _existing(arg: str, cwd: Path | None) -> Path | None:
    if os.sep not in arg:
        return None
    candidate = Path(arg) if os.path.isabs(arg) or cwd is None else cwd / arg
    return candidate if candidate.exists() else None


def _needs(target: Path, path: str, depth: int) -> list[Path]:
    """What one named file needs: its folder (as named and as resolved), its virtualenv and interpreter's
    prefix, its package's modules, and whatever its `#!` interpreter needs."""
    if depth > 3:
        return []
    real = target.resolve()
    out: list[Path] = []
    for p in dict.fromkeys((target.absolute(), real)):
        folder = p if p.is_dir() else p.parent
        out.append(folder)
        out += _virtualenv(folder)
        out += _node_package(folder)
    out += _prefix(real)
    interpreter = _shebang(real, path)
    if interpreter is not None:
        out += _needs(interpreter, path, depth + 1)
    return out


def _ancestors(folder: Path) -> Iterable[Path]:
    yield folder
    yield from folder.parents


def _virtualenv(folder: Path) -> list[Path]:
    """The virtualenv holding `folder` (its `pyvenv.cfg` marks it) and the prefix of its base Python."""
    for d in _ancestors(folder):
        cfg = d / "pyvenv.cfg"
        if cfg.is_file():
            out = [d]
            for line in _read_text(cfg).splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    home = Path(value.strip())  # the base interpreter's bin folder
                    out += [home, home.parent] if home.name == "bin" else [home]
            return out
    return []


def _node_package(folder: Path) -> list[Path]:
    """For a file inside `node_modules`: the outermost `node_modules` (where its dependencies are hoisted,
    and its `.bin` links); otherwise the nearest folder with a `package.json` (its own modules inside)."""
    parts = folder.parts
    if "node_modules" in parts:
        return [Path(*parts[: parts.index("node_modules") + 1])]
    for d in _ancestors(folder):
        if (d / "package.json").is_file():
            return [d] if (d / "node_modules").is_dir() else []
    return []


def _prefix(program: Path) -> list[Path]:
    """An interpreter's prefix (`.../bin/python3` -> `...`), where its standard library lives."""
    if program.parent.name == "bin" and program.name.startswith(("python", "node", "pypy", "bun", "deno")):
        return [program.parent.parent]
    return []


def _shebang(program: Path, path: str) -> Path | None:
    try:
        with program.open("rb") as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return _program(names[0], path) if names else None
    return Path(words[0]) if Path(words[0]).exists() else None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


_NPX_FLAGS = ("-y", "--yes", "-q", "--quiet")


def npx_cached(argv: Sequence[str], env: Mapping[str, str] | None = None) -> list[str]:
    """`npx -y PACKAGE ARGS` as the command of npx's earlier install of PACKAGE, when there is one; any
    other command line as it is."""
    if not argv or Path(argv[0]).name != "npx":
        return list(argv)
    rest = list(argv[1:])
    while rest and rest[0] in _NPX_FLAGS:
        rest.pop(0)
    if not rest or rest[0].startswith("-"):
        return list(argv)  # options npx alone understands (--package, -c): leave them to it
    spec, args = rest[0], rest[1:]
    given = dict(env or {})
    cache = Path(_setting(given, "npm_config_cache") or _home(given) / ".npm")
    folder = cache / "_npx" / hashlib.sha512(spec.encode()).hexdigest()[:16] / "node_modules"
    program = _bin(folder, _package_name(spec))
    return [str(program), *args] if program is not None else list(argv)


def _setting(env: Mapping[str, str], name: str) -> str | None:
    """npm's setting `name` from the server's environment, else fugu's (npm reads either case)."""
    for source in (env, os.environ):
        for key, value in source.items():
            if key.lower() == name and value:
                return value
    return None


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


def _package_name(spec: str) -> str:
    """`@scope/name@1.2` -> `@scope/name`; `name@latest` -> `name`."""
    at = spec.find("@", 1)
    return spec[:at] if at > 0 else spec


def _bin(modules: Path, name: str) -> Path | None:
    """The program npx would run for package `name` installed in `modules`."""
    try:
        manifest = json.loads((modules / name / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    bins = manifest.get("bin")
    short = name.rsplit("/", 1)[-1]
    if isinstance(bins, str):
        chosen = short
    elif isinstance(bins, dict) and bins:
        chosen = short if short in bins else next(iter(bins)) if len(bins) == 1 else ""
    else:
        return None
    program = modules / ".bin" / chosen
    return program if chosen and program.exists() else None
