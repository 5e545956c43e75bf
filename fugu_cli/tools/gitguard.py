"""The git directories a sandboxed command sees: only what git itself writes can change, nothing git reads as
configuration can appear.

A writable command gets, at each git directory, a stand-in folder made inside it just before the command:
the state files git rewrites (index, HEAD, packed-refs...; HEAD and the index copied, the rest hard links),
the object, ref and log folders bound writable, every other entry (config, hooks, info, worktrees, modules,
commondir, gitdir...) bound read-only. What the command creates there beside them (a `commondir`, a
`config.worktree`, hooks) lives only in the stand-in and is dropped; after the command the state files it
changed move back, checked (a HEAD git can read, no new submodule entry in the index). A long-lived process
gets the git directories read-only. Pure file work and bwrap options: starts no process.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fugu_cli.tools import gitindex

log = logging.getLogger("fugu.sandbox")

# State files git replaces (lock file, then rename) or removes: they come back after the command.
STATE_FILES = frozenset(
    {
        "index", "HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR",
        "AUTO_MERGE", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD", "SQUASH_MSG", "COMMIT_EDITMSG",
        "TAG_EDITMSG", "NOTES_EDITMSG", "BISECT_LOG", "BISECT_START", "BISECT_EXPECTED_REV",
        "BISECT_ANCESTORS_OK", "BISECT_NAMES", "BISECT_TERMS", "BISECT_RUN", "BISECT_HEAD", "packed-refs",
        "shallow",
    }
)  # fmt: skip
# Folders of data git writes in place: objects, refs and their logs (nothing in them names a command).
WRITABLE_DIRS = frozenset({"objects", "refs", "logs", "reftable", "lfs", "rr-cache"})
_NEVER_REMOVED = frozenset({"HEAD"})  # without it git stops seeing a repository here
# Copied, not linked: a write in place would reach the real file before it is checked.
_CHECKED = frozenset({"HEAD", "index"})
_STAND_IN = ".fugu-stand-in-"
_HEAD = re.compile(rb"\A(?:ref: refs/[^\s\0]+|[0-9a-f]{40}|[0-9a-f]{64})\n?\Z")


@dataclass
class StandIn:
    """One git directory's stand-in. It outlives the command: its skeleton (the empty folders and files the
    real entries are bound onto) is kept for the next command in this process, and only what the command
    left beside it is removed (making and removing folders is what costs on some filesystems)."""

    real: Path
    stage: Path
    skeleton: dict[str, bool] = field(default_factory=dict)  # entry -> is a folder
    before: dict[str, int] = field(default_factory=dict)  # state file -> its inode when the command began
    copies: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # HEAD, index: (inode, mtime, size)
    hash_size: int = 20


_idle: dict[Path, list[StandIn]] = {}
_idle_lock = threading.Lock()
_at_exit = False


@dataclass
class Guard:
    """The bwrap options for a command's view of its git directories, and what to settle afterwards."""

    options: list[str] = field(default_factory=list)
    stand_ins: list[StandIn] = field(default_factory=list)

    def settle(self) -> list[str]:
        """Move the state files the command changed back (once it has ended); return notes for its output."""
        notes: list[str] = []
        for s in self.stand_ins:
            try:
                notes += _settle(s)
                _reset(s)
            except OSError as e:  # a stand-in that cannot be cleaned is not used again
                log.info("stand-in %s dropped: %s", s.stage, e)
                shutil.rmtree(s.stage, ignore_errors=True)
                continue
            with _idle_lock:
                _idle.setdefault(s.real, []).append(s)
        return notes


def read_only(git_dirs: list[Path], dot_git: Path) -> list[str]:
    """Options that bind every git directory (and a `.git` file) read-only: for long-lived processes."""
    opts = [o for d in _ordered(git_dirs) for o in ("--ro-bind", str(d), str(d))]
    if dot_git.is_file() and not dot_git.is_symlink():
        opts += ["--ro-bind", str(dot_git), str(dot_git)]
    return opts


def guard(git_dirs: list[Path], workspace: Path) -> Guard:
    """Stand-ins for `git_dirs` (the common one first), the workspace's `.git` file read-only, and the `.git`
    of every submodule in the index read-only (git runs a submodule's own config when it checks it)."""
    dot_git = workspace / ".git"
    result = Guard()
    try:
        for d in _ordered(git_dirs):
            stand_in = _stand_in(d)
            result.stand_ins.append(stand_in)
            result.options += _stand_in_options(stand_in)
    except OSError as e:  # the git directory is not ours to write: git may read it, not change it
        log.info("no stand-in for %s (%s): it is read-only for the command", git_dirs, e)
        for s in result.stand_ins:
            shutil.rmtree(s.stage, ignore_errors=True)
        return Guard(read_only(git_dirs, dot_git))
    if dot_git.is_file() and not dot_git.is_symlink():
        result.options += ["--ro-bind", str(dot_git), str(dot_git)]
    for sub in _submodules(git_dirs[0] if git_dirs else None, workspace):
        result.options += ["--ro-bind", str(sub), str(sub)]
    return result


def forget() -> None:
    """Remove the idle stand-ins (at exit; a killed process's are swept by the next one)."""
    with _idle_lock:
        stages = [s.stage for pool in _idle.values() for s in pool]
        _idle.clear()
    for stage in stages:
        shutil.rmtree(stage, ignore_errors=True)


def _submodules(git_dir: Path | None, workspace: Path) -> list[Path]:
    """The `.git` of each submodule the workspace's index names (that exists and is no link)."""
    if git_dir is None:
        return []
    try:
        paths = gitindex.gitlinks(git_dir / "index", gitindex.hash_size(git_dir), shared_dir=git_dir)
    except (OSError, ValueError):
        return []
    subs = [workspace / p / ".git" for p in sorted(paths)]
    return [s for s in subs if os.path.lexists(s) and not s.is_symlink()]


def _ordered(git_dirs: list[Path]) -> list[Path]:
    """Outer folders first: a linked worktree's git dir lies inside the common one's `worktrees/`."""
    return sorted(dict.fromkeys(git_dirs), key=lambda d: len(d.parts))


def _stand_in(real: Path) -> StandIn:
    with _idle_lock:
        pool = _idle.get(real)
        s = pool.pop() if pool else None
    if s is None or not s.stage.is_dir():  # a removed worktree took its git dir, stand-in and all
        s = _new_stand_in(real)
    s.before.clear()
    s.copies.clear()
    s.hash_size = gitindex.hash_size(real)
    entries = [n for n in os.listdir(real) if not n.startswith(_STAND_IN)]
    present = {n for n in entries if os.path.exists(real / n)}  # a dangling link has nothing to bind
    for name in set(s.skeleton) - present:  # gone from the real folder since the last command
        _remove(s.stage / name)
        del s.skeleton[name]
    for name in entries:
        path = real / name
        st = path.lstat()
        if _is_state(name) and stat.S_ISREG(st.st_mode):
            if s.skeleton.pop(name, None) is not None:  # it was no regular file last time
                _remove(s.stage / name)
            s.before[name] = st.st_ino
            if name in _CHECKED:
                shutil.copy2(path, s.stage / name)
                copy = (s.stage / name).stat()
                s.copies[name] = (copy.st_ino, copy.st_mtime_ns, copy.st_size)
            else:
                os.link(path, s.stage / name)
        elif name in present and s.skeleton.get(name) != path.is_dir():
            _remove(s.stage / name)
            if path.is_dir():
                (s.stage / name).mkdir()
            else:
                (s.stage / name).touch()
            s.skeleton[name] = path.is_dir()
    return s


def _new_stand_in(real: Path) -> StandIn:
    _sweep(real)
    stage = real / f"{_STAND_IN}{os.getpid()}-{secrets.token_hex(4)}"
    stage.mkdir(mode=0o700)
    global _at_exit
    with _idle_lock:
        if not _at_exit:
            _at_exit = True
            atexit.register(forget)
    return StandIn(real, stage)


def _reset(s: StandIn) -> None:
    """Leave only the skeleton, empty, for the next command."""
    for name in os.listdir(s.stage):
        path = s.stage / name
        st = path.lstat()
        is_dir = stat.S_ISDIR(st.st_mode)
        empty = not os.listdir(path) if is_dir else stat.S_ISREG(st.st_mode) and st.st_size == 0
        if s.skeleton.get(name) == is_dir and empty:
            continue
        _remove(path)
        s.skeleton.pop(name, None)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _stand_in_options(s: StandIn) -> list[str]:
    opts = ["--bind", str(s.stage), str(s.real)]
    for name in sorted(s.skeleton):
        writable = name in WRITABLE_DIRS and (s.real / name).is_dir()
        opts += ["--bind" if writable else "--ro-bind", str(s.real / name), str(s.real / name)]
    return opts


def _is_state(name: str) -> bool:
    return name in STATE_FILES or name.startswith("sharedindex.")


def _sweep(real: Path) -> None:
    """Remove stand-ins a killed fugu left (their process is gone)."""
    for name in os.listdir(real):
        if not name.startswith(_STAND_IN):
            continue
        pid = name[len(_STAND_IN) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(real / name, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _settle(s: StandIn) -> list[str]:
    notes: list[str] = []
    names = {n for n in os.listdir(s.stage) if _is_state(n)} | set(s.before)
    for name in sorted(names):
        staged, real = s.stage / name, s.real / name
        before = s.before.get(name)
        if _inode(real) != before:  # changed outside the sandbox meanwhile (the user's own git): theirs stays
            continue
        try:
            st = staged.lstat()
        except FileNotFoundError:
            if before is not None and name not in _NEVER_REMOVED:
                real.unlink(missing_ok=True)
            continue
        if name in s.copies:
            changed = (st.st_ino, st.st_mtime_ns, st.st_size) != s.copies[name]
        else:
            changed = st.st_ino != before  # a write in place already reached the real file (a hard link)
        if not changed or not stat.S_ISREG(st.st_mode):
            continue
        why = _refused(s, name, staged)
        if why:
            notes.append(f"[sandbox: the command's change to .git/{name} was dropped: {why}]")
            continue
        os.replace(staged, real)
    return notes


def _inode(path: Path) -> int | None:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    return st.st_ino if stat.S_ISREG(st.st_mode) else -1


def _refused(s: StandIn, name: str, staged: Path) -> str | None:
    if name == "HEAD":
        with contextlib.suppress(OSError):
            if _HEAD.match(staged.read_bytes()[:200]):
                return None
        return "it is not a HEAD git can read (git would look for a repository elsewhere)"
    if name == "index":
        added = _gitlinks(staged, s) - _gitlinks(s.real / name, s)
        if added:
            shown = ", ".join(sorted(added)[:3])
            return (
                f"it adds a submodule entry ({shown}) for a repository the command wrote; git would run "
                "that repository's configuration on your next git status"
            )
    return None


def _gitlinks(index: Path, s: StandIn) -> set[str]:
    try:
        return gitindex.gitlinks(index, s.hash_size, shared_dir=index.parent)
    except FileNotFoundError:
        return set()
    except (OSError, ValueError):
        return {"(an index fugu cannot read)"}
