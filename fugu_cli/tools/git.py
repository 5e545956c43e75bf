"""fugu's git in the repository: the git_* tools, ultra mode's worktrees and the checkpoints they start from,
and their cleanup. (/undo's checkpoints live in fugu's own store: checkpoints.py.)

Every git command goes through `gitrun.git` (hardened against the repository's own config, sandboxed, minimal
environment). Checkpoints never touch the user's index, HEAD or branch.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.tools.checkpoints import stale_refs
from fugu_cli.tools.gitrun import GitError as GitError
from fugu_cli.tools.gitrun import excluding, submodules
from fugu_cli.tools.gitrun import git as _git
from fugu_cli.tools.sandbox import git_dirs
from fugu_cli.tools.textio import shown

CHECKPOINT_REF = "refs/fugu/checkpoints/"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "fugu",
    "GIT_AUTHOR_EMAIL": "fugu@localhost",
    "GIT_COMMITTER_NAME": "fugu",
    "GIT_COMMITTER_EMAIL": "fugu@localhost",
}
_NO_DRIVERS = ("--no-ext-diff", "--no-textconv")


def _require_repo(root: Path) -> None:
    if _git(root, "rev-parse", "--git-dir", check=False).returncode != 0:
        raise ToolFailed(f"{root} is not inside a git repository.")


def _head(root: Path) -> str | None:
    proc = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


# --- tools the model calls ------------------------------------------------------------------------------


def git_status(inv: Invocation) -> str:
    """Show the current branch and which files are modified, staged or untracked (git status --short)."""
    _require_repo(inv.root)
    out = shown(_git(inv.root, "status", "--short", "--branch", cancel=inv.ctx.cancel).stdout.rstrip())
    return out if "\n" in out else f"{out}\nNothing to commit, working tree clean."


def git_diff(inv: Invocation, path: str | None = None) -> str:
    """Show uncommitted changes (staged and unstaged, against the last commit) as a unified diff.

    Untracked files are listed by name only; read them with read_file.

    Args:
        path: Limit the diff to this file or directory, relative to the repository root. Default: everything.
    """
    _require_repo(inv.root)
    spec = [inv.rel(inv.resolve(path))] if path else []
    cancel = inv.ctx.cancel
    if _head(inv.root):
        diff = _git(inv.root, "diff", *_NO_DRIVERS, "HEAD", "--", *spec, cancel=cancel).stdout
    else:
        diff = (
            _git(inv.root, "diff", *_NO_DRIVERS, "--cached", "--", *spec, cancel=cancel).stdout
            + _git(inv.root, "diff", *_NO_DRIVERS, "--", *spec, cancel=cancel).stdout
        )
    untracked = _git(inv.root, "ls-files", "--others", "--exclude-standard", "--", *spec).stdout.split()
    note = ("\nUntracked files:\n" + "\n".join(untracked)) if untracked else ""
    if not diff and not note:
        return "No uncommitted changes."
    return shown((diff.rstrip() + note).strip())


def git_log(inv: Invocation, n: int | None = None) -> str:
    """Show the most recent commits: short hash, date, author and subject.

    Args:
        n: How many commits to show. Default 10, max 200.
    """
    _require_repo(inv.root)
    count = 10 if n is None else n
    if count < 1:
        raise ToolFailed(f"n must be at least 1 (got {n}).")
    if not _head(inv.root):
        return "No commits yet."
    fmt = "--format=%h %ad %an: %s"
    return shown(_git(inv.root, "log", f"-n{min(count, 200)}", "--date=short", fmt).stdout.rstrip())


def git_commit(inv: Invocation, message: str) -> str:
    """Stage every change (git add -A, respecting .gitignore) and commit it with the given message.

    Args:
        message: The commit message: a short subject line, optionally a blank line and a body.
    """
    _require_repo(inv.root)
    if not message.strip():
        raise ToolFailed("The commit message is empty; give a short subject line.")
    status = _git(inv.root, "status", "--short").stdout
    if not status.strip():
        raise ToolFailed("Nothing to commit: the working tree is clean.")
    subject = message.strip().splitlines()[0]
    inv.gate(["git_commit"], f"git commit: {subject[:120]}", f"{message}\n\n{status}")
    inv.before_write()
    _add_all(inv.root)
    staged = _git(inv.root, "diff", *_NO_DRIVERS, "--cached", "--name-only", "-z").stdout.split("\0")
    if not any(staged):
        raise ToolFailed("Nothing to commit: no changes after staging (only ignored files changed?).")
    proc = _git(inv.root, "commit", "-q", "--no-verify", "-F", "-", input=message, check=False, write=True)
    if proc.returncode != 0:
        raise ToolFailed(f"git commit failed: {(proc.stderr or proc.stdout).strip()}")
    for path in filter(None, staged):
        inv.touched(path)
    summary = _git(inv.root, "log", *_NO_DRIVERS, "-1", "--stat", "--format=Committed %h %s").stdout
    return shown(summary.rstrip())


# --- library functions for /undo and ultra mode -------------------------------------------------------


def _add_all(
    cwd: Path,
    index: Path | None = None,
    env: dict[str, str] | None = None,
    writable: list[Path] | None = None,
) -> None:
    """`git add -A` of the whole tree, never entering a submodule and never adding one: a repository in the
    tree (one a command cloned or made) stays out, or the user's next `git status` would run its config."""
    gits = git_dirs(cwd)
    index = index or (gits[0] / "index" if gits else None)
    before = submodules(index, gits[-1]) if gits and index else set()
    _git(cwd, "add", "-A", "--", ".", *excluding(before), env=env, write=True, writable=writable or [])
    added = submodules(index, gits[-1]) - before if gits and index else set()
    if added:
        paths = "".join(f"{p}\0" for p in sorted(added))
        remove = ("update-index", "--force-remove", "-z", "--stdin")
        _git(cwd, *remove, env=env, input=paths, write=True, writable=writable or [])


@contextmanager
def _scratch_index(cwd: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A throwaway index seeded from the real one (for its stat cache), so `git add -A` stays fast."""
    real = Path(_git(cwd, "rev-parse", "--path-format=absolute", "--git-path", "index").stdout.strip())
    with tempfile.TemporaryDirectory(prefix="fugu-index-") as tmp:
        scratch = Path(tmp) / "index"
        if real.exists():
            shutil.copy2(real, scratch)
        yield {"GIT_INDEX_FILE": str(scratch)}, Path(tmp)


def _snapshot_tree(cwd: Path) -> str:
    """The tree object of the working tree as it is now, untracked (not ignored) files included."""
    with _scratch_index(cwd) as (env, tmp):
        _add_all(cwd, tmp / "index", env=env, writable=[tmp])
        return _git(cwd, "write-tree", env=env, write=True, writable=[tmp]).stdout.strip()


def checkpoint(root: Path, label: str) -> str:
    """Snapshot the whole working tree as a commit on refs/fugu/checkpoints/<label> in the repository (a
    worktree's start: `git worktree add` needs it there); return its sha.

    The user's index, HEAD and branch are untouched; the commit's parent is HEAD when there is one.
    """
    ref = CHECKPOINT_REF + label
    if _git(root, "check-ref-format", ref, check=False).returncode != 0:
        raise GitError(f"{label!r} is not a valid checkpoint label (it must be usable in a git ref name).")
    tree = _snapshot_tree(root)
    head = _head(root)
    parents = ["-p", head] if head else []
    message = f"fugu checkpoint {label}"
    sha = _git(root, "commit-tree", tree, *parents, "-m", message, env=_IDENTITY, write=True)
    commit = sha.stdout.strip()
    _git(root, "update-ref", ref, commit, write=True)
    return commit


def add_worktree(root: Path, dest: Path, base: str | None = None) -> str:
    """Create a detached worktree at `dest`; return the commit it starts from.

    With `base=None` it starts from a checkpoint of the current tree, so the user's uncommitted changes
    (untracked files included) are visible in it and `worktree_diff(dest, returned_sha)` shows only what
    happened in the worktree. Otherwise it starts at `base` (any commit-ish).
    """
    if base is None:
        start = checkpoint(root, _worktree_label(dest))
    else:
        start = _git(root, "rev-parse", "--verify", f"{base}^{{commit}}").stdout.strip()
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(root, "worktree", "add", "--detach", str(dest), start, write=True, writable=[dest.parent])
    return start


def remove_worktree(root: Path, dest: Path) -> None:
    """Delete the worktree at `dest` (uncommitted changes in it are discarded) and forget it."""
    if dest.exists():
        _git(root, "worktree", "remove", "--force", str(dest), write=True, writable=[dest.parent])
    _git(root, "worktree", "prune", write=True)
    _git(root, "update-ref", "-d", CHECKPOINT_REF + _worktree_label(dest), check=False, write=True)


def _worktree_label(dest: Path) -> str:
    return "worktree-" + re.sub(r"[^A-Za-z0-9_-]+", "-", dest.name)


def worktree_diff(dest: Path, base: str) -> str:
    """A binary-safe patch (for `git apply`) of all changes in `dest` since `base`, untracked included."""
    tree = _snapshot_tree(dest)
    return _git(dest, "diff", *_NO_DRIVERS, "--binary", "--full-index", "--no-renames", base, tree).stdout


def apply_patch(root: Path, patch: str) -> tuple[bool, str]:
    """Apply `patch` to the working tree at `root` (not the index). All or nothing.

    Returns (True, list of changed files) or (False, why) with the user's files left exactly as they were.
    """
    if not patch.strip():
        return True, "Nothing to apply: the patch is empty."
    check = _git(root, "apply", "--check", "--whitespace=nowarn", "-", input=patch, check=False)
    if check.returncode != 0:
        return False, f"The patch does not apply cleanly; nothing was changed:\n{check.stderr.strip()}"
    files = _git(root, "apply", "--numstat", "-", input=patch).stdout
    _git(root, "apply", "--whitespace=nowarn", "-", input=patch, write=True)
    names = [line.split("\t", 2)[2] for line in files.splitlines() if line.count("\t") >= 2]
    return True, "Applied changes to: " + ", ".join(names)


# --- cleanup: checkpoints of old sessions, worktrees of runs that died ---------------------------------

WORKTREE_LOCK = ".fugu-run.lock"


def prune_checkpoints(root: Path, keep_sessions: int = 20, keep: frozenset[str] = frozenset()) -> list[str]:
    """Delete the checkpoint refs of all but the newest `keep_sessions` sessions; return the refs deleted.

    Sessions are ranked by their newest checkpoint. Refs whose label does not start with a session id
    (`worktree-*`) and sessions in `keep` (the one running) are left alone.
    """
    listing = _git(
        root, "for-each-ref", "--format=%(refname)%00%(committerdate:unix)", CHECKPOINT_REF, check=False
    ).stdout
    doomed = stale_refs(listing, CHECKPOINT_REF, keep_sessions, keep)
    if doomed:
        _git(root, "update-ref", "--stdin", input="".join(f"delete {r}\n" for r in doomed), write=True)
    return doomed


@contextmanager
def hold_worktrees(folder: Path) -> Iterator[Path]:
    """Mark `folder` (one run's worktrees, FUGU_HOME/worktrees/<session>) as in use while the block runs.

    The mark is an flock the kernel drops when the process dies, so `remove_stale_worktrees` in a later
    run knows this folder's worktrees were left by a run that was killed.
    """
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WORKTREE_LOCK
    with path.open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            path.unlink(missing_ok=True)  # a run that ends normally leaves nothing behind


def _in_use(folder: Path) -> bool:
    import fcntl

    try:
        with (folder / WORKTREE_LOCK).open("a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
            return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def registered_worktrees(root: Path) -> list[Path]:
    """The linked worktrees git knows for `root` (the main one excluded)."""
    out = _git(root, "worktree", "list", "--porcelain", "-z", check=False).stdout
    paths = [Path(f[len("worktree ") :]) for f in out.split("\0") if f.startswith("worktree ")]
    return paths[1:]


def stale_worktrees(root: Path, worktrees_home: Path) -> list[Path]:
    """Worktrees of `root` under `worktrees_home` whose run is gone (its folder is not held)."""
    home = worktrees_home.resolve() if worktrees_home.exists() else worktrees_home
    stale: list[Path] = []
    for path in registered_worktrees(root):
        try:
            rel = path.relative_to(home)
        except ValueError:
            continue
        if rel.parts and not _in_use(home / rel.parts[0]):
            stale.append(path)
    return stale


def remove_stale_worktrees(root: Path, worktrees_home: Path) -> list[Path]:
    """Remove the worktrees a killed run left (and their checkpoint refs), prune git's records of vanished
    ones, and delete run folders under `worktrees_home` that hold nothing else; return what was removed."""
    removed: list[Path] = []
    for path in stale_worktrees(root, worktrees_home):
        if path.exists():
            _git(
                root,
                "worktree",
                "remove",
                "--force",
                str(path),
                check=False,
                write=True,
                writable=[path.parent],
            )
            shutil.rmtree(path, ignore_errors=True)
        _git(root, "update-ref", "-d", CHECKPOINT_REF + _worktree_label(path), check=False, write=True)
        removed.append(path)
    _git(root, "worktree", "prune", write=True)
    if worktrees_home.is_dir():
        for run in worktrees_home.iterdir():
            if run.is_dir() and not _in_use(run) and _holds_nothing(run):
                shutil.rmtree(run, ignore_errors=True)
    return removed


def _holds_nothing(folder: Path) -> bool:
    """True if `folder` has only empty folders and the lock file: no worktree of any repository is left."""
    return all(f == WORKTREE_LOCK for _, _dirs, files in os.walk(folder) for f in files)
