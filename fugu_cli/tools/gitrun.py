"""The one way fugu runs git: a repository's config can make git run nothing and see nothing of fugu's.

Every call gets `core.fsmonitor` off, hooks pointed at /dev/null (no hook can exist there), no pager, no
auto-gc, the filter/merge drivers the repository's own config defines emptied and its signing programs
unused. It runs in the sandbox (read-only unless it writes) with the minimal environment. Callers add
`--no-ext-diff --no-textconv` to diffs. Used by git.py and listing.py; knows nothing of tools or checkpoints.
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from fugu_cli.errors import FuguError
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
)
# repo-defined drivers whose commands git would run: <section>.<driver>.<key>
_DRIVER_KEYS = {
    "filter": ("clean", "smudge", "process"),
    "diff": ("textconv", "command"),
    "merge": ("driver",),
}
_UNTRUSTED_SCOPES = ("local", "worktree")
_cache: dict[tuple[str, tuple[float, ...]], tuple[str, ...]] = {}
_cache_lock = threading.Lock()


class GitError(FuguError):
    """A git command failed; the message carries git's own words."""


def _config_files(cwd: Path) -> list[Path]:
    return [d / name for d in sb.git_dirs(cwd) for name in ("config", "config.worktree")]


def _mtimes(cwd: Path) -> tuple[float, ...]:
    out: list[float] = []
    for path in _config_files(cwd):
        try:
            out.append(path.stat().st_mtime_ns)
        except OSError:
            out.append(-1)
    return tuple(out)


def neutralizers(cwd: Path) -> tuple[str, ...]:
    """`-c` settings that empty every command the repository's own config names for a driver."""
    key = (str(cwd.resolve()), _mtimes(cwd))
    with _cache_lock:
        if key in _cache:
            return _cache[key]
    proc = _raw(cwd, ["config", "--list", "-z", "--show-scope", "--includes"], write=False)
    found: list[str] = []
    entries = proc.stdout.split("\0")  # "scope\0name\nvalue\0" per entry
    for scope, item in zip(entries[0::2], entries[1::2], strict=False):
        if scope in _UNTRUSTED_SCOPES:
            found.extend(_neutral(item.split("\n", 1)[0]))
    result = tuple(dict.fromkeys(found))
    with _cache_lock:
        _cache[key] = result
    return result


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
        extra_config=neutralizers(cwd) if sb.git_dirs(cwd) else (),
        cancel=cancel,
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc
