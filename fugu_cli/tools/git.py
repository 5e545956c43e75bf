"""All of fugu's git: the git_* tools, plus checkpoints and worktrees for /undo and ultra mode.

The only module that runs git. It shells out to the `git` binary (gitpython, if ever needed, is imported
lazily here and nowhere else). Checkpoints never touch the user's index, HEAD or branch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from fugu_cli.errors import FuguError
from fugu_cli.tools.base import Invocation, ToolFailed

CHECKPOINT_REF = "refs/fugu/checkpoints/"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "fugu",
    "GIT_AUTHOR_EMAIL": "fugu@localhost",
    "GIT_COMMITTER_NAME": "fugu",
    "GIT_COMMITTER_EMAIL": "fugu@localhost",
}


class GitError(FuguError):
    """A git command failed; the message carries git's own words."""


def _git(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", **(env or {})}
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=full_env,
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args[:3])} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc


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
    out = _git(inv.root, "status", "--short", "--branch").stdout.rstrip()
    return out if "\n" in out else f"{out}\nNothing to commit, working tree clean."


def git_diff(inv: Invocation, path: str | None = None) -> str:
    """Show uncommitted changes (staged and unstaged, against the last commit) as a unified diff.

    Untracked files are listed by name only; read them with read_file.

    Args:
        path: Limit the diff to this file or directory, relative to the repository root. Default: everything.
    """
    _require_repo(inv.root)
    spec = [inv.rel(inv.resolve(path))] if path else []
    if _head(inv.root):
        diff = _git(inv.root, "diff", "HEAD", "--", *spec).stdout
    else:
        diff = (
            _git(inv.root, "diff", "--cached", "--", *spec).stdout
            + _git(inv.root, "diff", "--", *spec).stdout
        )
    untracked = _git(inv.root, "ls-files", "--others", "--exclude-standard", "--", *spec).stdout.split()
    note = ("\nUntracked files:\n" + "\n".join(untracked)) if untracked else ""
    if not diff and not note:
        return "No uncommitted changes."
    return (diff.rstrip() + note).strip()


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
    return _git(inv.root, "log", f"-n{min(count, 200)}", "--date=short", fmt).stdout.rstrip()


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
    _git(inv.root, "add", "-A")
    staged = _git(inv.root, "diff", "--cached", "--name-only", "-z").stdout.split("\0")
    if not any(staged):
        raise ToolFailed("Nothing to commit: no changes after staging (only ignored files changed?).")
    proc = _git(inv.root, "commit", "-q", "--no-verify", "-F", "-", input=message, check=False)
    if proc.returncode != 0:
        raise ToolFailed(f"git commit failed: {(proc.stderr or proc.stdout).strip()}")
    for path in filter(None, staged):
        inv.touched(path)
    return _git(inv.root, "log", "-1", "--stat", "--format=Committed %h %s").stdout.rstrip()


# --- library functions for /undo and ultra mode -------------------------------------------------------


@contextmanager
def _scratch_index(cwd: Path) -> Iterator[dict[str, str]]:
    """A throwaway index seeded from the real one (for its stat cache), so `git add -A` stays fast."""
    real = Path(_git(cwd, "rev-parse", "--path-format=absolute", "--git-path", "index").stdout.strip())
    with tempfile.TemporaryDirectory(prefix="fugu-index-") as tmp:
        scratch = Path(tmp) / "index"
        if real.exists():
            shutil.copy2(real, scratch)
        yield {"GIT_INDEX_FILE": str(scratch)}


def _snapshot_tree(cwd: Path) -> str:
    """The tree object of the working tree as it is now, untracked (not ignored) files included."""
    with _scratch_index(cwd) as env:
        _git(cwd, "add", "-A", "--", ".", env=env)
        return _git(cwd, "write-tree", env=env).stdout.strip()


def checkpoint(root: Path, label: str) -> str:
    """Snapshot the whole working tree as a commit on refs/fugu/checkpoints/<label>; return its sha.

    The user's index, HEAD and branch are untouched; the commit's parent is HEAD when there is one.
    """
    ref = CHECKPOINT_REF + label
    if _git(root, "check-ref-format", ref, check=False).returncode != 0:
        raise GitError(f"{label!r} is not a valid checkpoint label (it must be usable in a git ref name).")
    tree = _snapshot_tree(root)
    head = _head(root)
    parents = ["-p", head] if head else []
    sha = _git(root, "commit-tree", tree, *parents, "-m", f"fugu checkpoint {label}", env=_IDENTITY)
    commit = sha.stdout.strip()
    _git(root, "update-ref", ref, commit)
    return commit


def restore_checkpoint(root: Path, sha: str) -> list[str]:
    """Make the working tree exactly the snapshot `sha`; return the paths that changed.

    Modified files get their snapshot content back, files created since are deleted, deleted ones return.
    Ignored files, the user's index, HEAD and branch are left alone.
    """
    target = _git(root, "rev-parse", "--verify", f"{sha}^{{tree}}").stdout.strip()
    current = _snapshot_tree(root)
    diff = _git(root, "diff-tree", "-r", "-z", "--no-renames", "--name-status", current, target).stdout
    fields = [f for f in diff.split("\0") if f]
    changes = list(zip(fields[0::2], fields[1::2], strict=True))
    top = root.resolve()
    for path in (path for status, path in changes if status == "D"):
        _remove(top, path)
    restore = [path for status, path in changes if status != "D"]
    if restore:
        for path in restore:
            # an untracked directory where the snapshot has a file must go before the file comes back
            p = top / path
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
        with _scratch_index(root) as env:
            _git(root, "read-tree", target, env=env)
            _git(root, "checkout-index", "-f", "-z", "--stdin", env=env, input="\0".join(restore) + "\0")
    return sorted(path for _, path in changes)


def _remove(top: Path, rel: str) -> None:
    p = top / rel
    if p.is_symlink() or p.is_file():
        p.unlink()
    parent = p.parent
    while parent != top and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


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
    _git(root, "worktree", "add", "--detach", str(dest), start)
    return start


def remove_worktree(root: Path, dest: Path) -> None:
    """Delete the worktree at `dest` (uncommitted changes in it are discarded) and forget it."""
    if dest.exists():
        _git(root, "worktree", "remove", "--force", str(dest))
    _git(root, "worktree", "prune")
    _git(root, "update-ref", "-d", CHECKPOINT_REF + _worktree_label(dest), check=False)


def _worktree_label(dest: Path) -> str:
    return "worktree-" + re.sub(r"[^A-Za-z0-9_-]+", "-", dest.name)


def worktree_diff(dest: Path, base: str) -> str:
    """A binary-safe patch (for `git apply`) of all changes in `dest` since `base`, untracked included."""
    tree = _snapshot_tree(dest)
    return _git(dest, "diff", "--binary", "--full-index", "--no-renames", base, tree).stdout


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
    _git(root, "apply", "--whitespace=nowarn", "-", input=patch)
    names = [line.split("\t", 2)[2] for line in files.splitlines() if line.count("\t") >= 2]
    return True, "Applied changes to: " + ", ".join(names)
