"""The one way fugu runs git: a repository's config can make git run nothing and see nothing of fugu's.

Every call gets `core.fsmonitor` off, hooks pointed at /dev/null (no hook can exist there), no pager, no
auto-gc, the filter/merge drivers the repository's own config defines emptied and its signing programs
unused, submodules never entered. It runs in the sandbox (read-only unless it writes) with the minimal
environment. Callers add `--no-ext-diff --no-textconv` to diffs. The only module that starts `git` (a test
holds every other module to that); knows nothing of tools or checkpoints.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from fugu_cli.errors import FuguError
from fugu_cli.tools import gitindex
from fugu_cli.tools import sandbox as sb

TIMEOUT_S = 600.0
SAFE_CONFIG = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "gc.auto=0",
    "maintenance.auto=false",
    "credential.helper=",
    "core.askPass=",
    # a folder that merely looks like a bare repository (HEAD, objects/, refs/, config) is not one
    "safe.bareRepository=explicit",
    # a submodule's status runs git inside it, with its own config: fugu never looks inside submodules
    "diff.ignoreSubmodules=all",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
)
# repo-defined drivers whose commands git would run: <section>.<driver>.<key>
_DRIVER_KEYS = {
    "filter": ("clean", "smudge", "process"),
    "diff": ("textconv", "command"),
    "merge": ("driver",),
}
_UNTRUSTED_SCOPES = ("local", "worktree")
_Stamp = tuple[object, ...]


@dataclasses.dataclass(frozen=True)
class _Scan:
    """What one reading of a repository's config found, and the files whose change would change it."""

    stamp: _Stamp
    watched: tuple[Path, ...]  # config files git read and the files its includes name (even missing ones)
    settings: tuple[str, ...]


_cache: dict[str, _Scan] = {}
_cache_lock = threading.Lock()


class GitError(FuguError):
    """A git command failed; the message carries git's own words."""


def _resolution_files(cwd: Path) -> list[Path]:
    """The files that decide which git directories, and so which config files, git uses from `cwd`: the
    `.git` entry it finds, each git directory's `commondir`, `config`, `config.worktree` and `HEAD` (an
    `includeIf "onbranch:"` depends on it)."""
    top = next((d for d in (cwd, *cwd.parents) if os.path.lexists(d / ".git")), None)
    if top is None:
        return []
    names = ("commondir", "config", "config.worktree", "HEAD")
    paths = [top / ".git", *(d / name for d in sb.git_dirs(top) for name in names)]
    return [Path(os.path.normpath(p)) for p in paths]


def _stamp(paths: Sequence[Path]) -> _Stamp:
    out: list[object] = []
    for path in paths:
        try:
            st = path.lstat()
        except OSError:
            out.append((str(path), None))
            continue
        content = b""
        if path.name in (".git", "commondir") and st.st_size <= 4096 and not path.is_dir():
            try:
                content = path.read_bytes()  # a rewritten gitdir pointer can keep its mtime and size
            except OSError:
                content = b"?"
        out.append((str(path), st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode, content))
    return tuple(out)


def neutralizers(cwd: Path) -> tuple[str, ...]:
    """`-c` settings that empty every command the repository's own config names for a driver.

    The reading is kept until any file git would read for it changes: the gitdir pointers (`.git`,
    `commondir`), every config file, every file an include names (also one that does not exist yet).
    """
    where = str(cwd.resolve())
    with _cache_lock:
        known = _cache.get(where)
    base = _resolution_files(cwd)
    watched = known.watched if known else ()
    stamp = _stamp(
        [*base, *watched]
    )  # taken before reading, so a change during the reading is seen next time
    if known is not None and known.stamp == stamp:
        return known.settings
    settings, read = _scan(cwd)
    extra = tuple(p for p in read if p not in base)  # included files: stamped only once known
    # an included file first seen now was not stamped before this reading: the next call reads again
    trusted = set(extra) <= set(watched)
    with _cache_lock:
        _cache[where] = _Scan(stamp if trusted else (), extra, settings)
    return settings


def _scan(cwd: Path) -> tuple[tuple[str, ...], tuple[Path, ...]]:
    proc = _raw(cwd, ["config", "--list", "-z", "--show-scope", "--show-origin", "--includes"], write=False)
    found: list[str] = []
    watched: list[Path] = []
    entries = proc.stdout.split("\0")  # "scope\0origin\0name\nvalue\0" per entry
    for scope, origin, item in zip(entries[0::3], entries[1::3], entries[2::3], strict=False):
        if scope not in _UNTRUSTED_SCOPES:
            continue
        name, _, value = item.partition("\n")
        source = Path(origin.removeprefix("file:")) if origin.startswith("file:") else None
        if source is not None:
            watched.append(Path(os.path.normpath(cwd / source)))
            lowered = name.lower()
            if lowered.startswith(("include.", "includeif.")) and lowered.endswith(".path") and value:
                target = Path(os.path.expanduser(value))
                path = target if target.is_absolute() else (cwd / source).parent / target
                watched.append(Path(os.path.normpath(path)))
        found.extend(_neutral(name))
    return tuple(dict.fromkeys(found)), tuple(dict.fromkeys(watched))


def submodules(index: Path, git_dir: Path) -> set[str]:
    """The paths of the submodule entries (gitlinks) in `index`. fugu's git leaves them out of `git add`:
    git checks a submodule by running git inside it, with the submodule's own config (whose filters are
    not the ones emptied here)."""
    try:
        return gitindex.gitlinks(index, gitindex.hash_size(git_dir), shared_dir=index.parent)
    except FileNotFoundError:
        return set()
    except (OSError, ValueError) as e:
        raise GitError(f"cannot read the index {index}: {e}") from e


def excluding(paths: set[str]) -> list[str]:
    """Pathspecs that leave `paths` out."""
    return [f":(exclude,top,literal){p}" for p in sorted(paths)]


def _neutral(name: str) -> list[str]:
    parts = name.split(".")
    if parts[0].lower() == "gpg":  # a signing program the repository chose: sign nothing rather than run it
        return ["commit.gpgSign=false", "tag.gpgSign=false"]
    if len(parts) < 3 or parts[0].lower() not in _DRIVER_KEYS:
        return []
    section, driver = parts[0].lower(), ".".join(parts[1:-1])
    out = [f"{section}.{driver}.{k}=" for k in _DRIVER_KEYS[section]]
    if section == "filter":
        out.append(f"filter.{driver}.required=false")
    if section == "diff":
        out.remove(f"diff.{driver}.textconv=")  # an empty textconv is an error; callers pass --no-textconv
        out.remove(f"diff.{driver}.command=")  # likewise; callers pass --no-ext-diff
    return out


def _raw(
    cwd: Path,
    args: Sequence[str],
    *,
    write: bool,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    writable: Sequence[Path] = (),
    extra_config: Sequence[str] = (),
    cancel: threading.Event | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    whole_fs = bool(args) and args[0] == "worktree"  # it must see every worktree, in /tmp or FUGU_HOME too
    config = [arg for item in (*SAFE_CONFIG, *extra_config) for arg in ("-c", item)]
    argv = ["git", "--no-pager", *config, *args]
    base = sb.default_policy()
    policy = dataclasses.replace(
        base,
        mode="off" if base.mode == "off" else ("workspace-write" if write else "read-only"),
        allow_network=False,
    )
    done = sb.run(
        argv,
        cwd=cwd,
        policy=policy,
        timeout=timeout,
        cancel=cancel,
        input=None if input is None else input.encode("utf-8", "surrogateescape"),
        writable=writable,
        env=env,
        merge_stderr=False,
        protect=False,
        whole_fs=whole_fs,
    )
    if done.timed_out or done.cancelled:
        why = "was cancelled" if done.cancelled else f"took longer than {timeout:g}s"
        raise GitError(f"git {' '.join(args[:3])} {why}")
    code = done.exit_code if done.exit_code is not None else -1
    stdout = done.output.decode("utf-8", "surrogateescape")
    stderr = done.errors.decode("utf-8", "replace")
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    write: bool = False,
    writable: Sequence[Path] = (),
    cancel: threading.Event | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `git args` in `cwd`, hardened and sandboxed; `write` lets it change the repository.

    stdout is decoded with surrogateescape, so paths from `-z` output go back into `input` byte for byte.
    """
    proc = _raw(
        cwd,
        args,
        write=write,
        env=env,
        input=input,
        writable=writable,
        extra_config=neutralizers(cwd),
        cancel=cancel,
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc
