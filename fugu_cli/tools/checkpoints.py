"""/undo's checkpoints: snapshots of a repository's working tree, kept in a git store of fugu's own under
FUGU_HOME/checkpoints, where no sandboxed command reaches (FUGU_HOME is hidden from every command).

So a command that deletes refs and runs `git gc` in the repository cannot take the user's uncommitted work
with it. The store has its own config, index (a stat cache) and objects; the repository's config, hooks and
drivers play no part, and the store's `info/attributes` unsets every filter and conversion, so a file comes
back byte for byte. What counts as the tree is what git in the repository sees: its ignore rules
(.gitignore, info/exclude, the user's excludes file) and every file it tracks. Never touches the
repository's index, HEAD, branch, refs or objects.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fugu_cli.tools.gitrun import GitError, excluding, submodules
from fugu_cli.tools.gitrun import git as _git
from fugu_cli.tools.sandbox import git_dirs

REF = "refs/fugu/checkpoints/"
_RAW = "* -text -eol -crlf -filter -diff -merge -ident -working-tree-encoding\n"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "fugu",
    "GIT_AUTHOR_EMAIL": "fugu@localhost",
    "GIT_COMMITTER_NAME": "fugu",
    "GIT_COMMITTER_EMAIL": "fugu@localhost",
}
_SESSION_ID = re.compile(r"^(\d{8}-\d{6}-(?:[0-9a-f]{12}|[0-9a-f]{6}))(?:-|$)")  # ids before 2026-12-02: 6


def store_path(root: Path) -> Path:
    """Where the checkpoints of the repository at `root` live."""
    from fugu_cli.config import fugu_home

    key = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:20]
    return fugu_home() / "checkpoints" / key


def save(root: Path, label: str) -> str:
    """Snapshot the working tree of `root` as a commit on refs/fugu/checkpoints/<label> in the store; return
    its sha. The repository itself is only read."""
    if not git_dirs(root):
        raise GitError(f"{root} is not the top of a git repository.")
    store = _open(root)
    ref = REF + label
    if _store_git(root, store, "check-ref-format", ref, check=False).returncode != 0:
        raise GitError(f"{label!r} is not a valid checkpoint label (it must be usable in a git ref name).")
    tree = _snapshot(root, store)
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}", check=False).stdout.strip()
    message = f"fugu checkpoint {label}\n\nrepository: {root.resolve()}\nhead: {head or '(none)'}\n"
    commit = _store_git(root, store, "commit-tree", tree, "-m", message, env=_IDENTITY).stdout.strip()
    _store_git(root, store, "update-ref", ref, commit)
    return commit


def restore(root: Path, sha: str) -> list[str]:
    """Make the working tree of `root` exactly the checkpoint `sha`; return the paths that changed.

    Modified files get their snapshot bytes back, files created since are deleted, deleted ones return.
    Ignored files and everything in the repository's .git are left alone.
    """
    store = _open(root)
    found = _store_git(root, store, "rev-parse", "--verify", "-q", f"{sha}^{{tree}}", check=False)
    if found.returncode != 0:
        raise GitError(f"checkpoint {sha[:12]} is not in fugu's store {store} (made by an older fugu?)")
    target = found.stdout.strip()
    current = _snapshot(root, store)
    diff = _store_git(root, store, "diff-tree", "-r", "-z", "--no-renames", "--name-status", current, target)
    fields = [f for f in diff.stdout.split("\0") if f]
    changes = list(zip(fields[0::2], fields[1::2], strict=True))
    top = root.resolve()
    for path in (path for status, path in changes if status == "D"):
        _remove(top, path)
    back = [path for status, path in changes if status != "D"]
    if back:
        for path in back:
            # an untracked directory where the snapshot has a file must go before the file comes back
            p = top / path
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
        with _scratch(store) as env:
            _store_git(root, store, "read-tree", target, env=env)
            files = "\0".join(back) + "\0"
            checkout = ("checkout-index", "-f", "-z", "--stdin")
            _store_git(root, store, *checkout, env=env, input=files, write=True)
    return sorted(path for _, path in changes)


def differs(root: Path, sha: str) -> bool:
    """Whether the working tree of `root` differs from the checkpoint `sha` (a sha the store does not hold
    counts as different)."""
    store = _open(root)
    found = _store_git(root, store, "rev-parse", "--verify", "-q", f"{sha}^{{tree}}", check=False)
    return found.returncode != 0 or _snapshot(root, store) != found.stdout.strip()


def prune(root: Path, keep_sessions: int = 20, keep: frozenset[str] = frozenset()) -> list[str]:
    """Delete the checkpoints of all but the newest `keep_sessions` sessions (and the objects only they
    held); sessions in `keep` stay. Return the refs deleted."""
    store = store_path(root)
    if not (store / "HEAD").exists():
        return []
    listing = _store_git(
        root, store, "for-each-ref", "--format=%(refname)%00%(committerdate:unix)", REF, check=False
    ).stdout
    doomed = stale_refs(listing, REF, keep_sessions, keep)
    if doomed:
        _store_git(root, store, "update-ref", "--stdin", input="".join(f"delete {r}\n" for r in doomed))
        _store_git(root, store, "gc", "--quiet", "--prune=now", check=False)
    return doomed


def stale_refs(listing: str, prefix: str, keep_sessions: int, keep: frozenset[str]) -> list[str]:
    """From `git for-each-ref --format=%(refname)%00%(committerdate:unix)` output under `prefix`: the refs
    of all but the newest `keep_sessions` sessions (ranked by their newest ref), sessions in `keep` and refs
    whose label does not start with a session id left alone."""
    newest: dict[str, int] = {}
    refs: dict[str, list[str]] = {}
    for line in listing.splitlines():
        ref, _, when = line.partition("\0")
        match = _SESSION_ID.match(ref.removeprefix(prefix))
        if not match:
            continue
        sid = match.group(1)
        refs.setdefault(sid, []).append(ref)
        newest[sid] = max(newest.get(sid, 0), int(when or 0))
    ranked = sorted(newest, key=lambda s: (newest[s], s), reverse=True)
    return [ref for sid in ranked[max(keep_sessions, 0) :] if sid not in keep for ref in refs[sid]]


def _open(root: Path) -> Path:
    """The store for `root`, made on first use; its ignore rules brought up to the repository's."""
    store = store_path(root)
    if not (store / "HEAD").exists():
        store.mkdir(parents=True, exist_ok=True)
        _git(store, "init", "-q", "--bare", str(store), write=True)
        (store / "repository").write_text(f"{root.resolve()}\n", encoding="utf-8")
    info = store / "info"
    info.mkdir(exist_ok=True)
    if _read(info / "attributes") != _RAW:
        (info / "attributes").write_text(_RAW, encoding="utf-8")
    exclude = _repo_exclude(root)
    if _read(info / "exclude") != exclude:
        (info / "exclude").write_text(exclude, encoding="utf-8")
    return store


def _repo_exclude(root: Path) -> str:
    gits = git_dirs(root)  # [its git dir, the common one]: info/ is the common one's
    return _read(gits[-1] / "info" / "exclude") if gits else ""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return ""


def _snapshot(root: Path, store: Path) -> str:
    """The tree of the working tree now, in the store: what git does not ignore, and all the repo tracks."""
    tracked_ignored = _git(root, "ls-files", "-z", "-ci", "--exclude-standard", check=False).stdout
    forced = [p for p in tracked_ignored.split("\0") if p and _plain(root / p)]
    with _scratch(store, keep=True) as env:
        # a nested repository is recorded once, as a submodule entry, and never looked inside again
        known = submodules(Path(env["GIT_INDEX_FILE"]), store)
        _store_git(root, store, "add", "-A", "--", ".", *excluding(known), env=env)
        if forced:
            pathspec = "\0".join(forced) + "\0"
            add = ("add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul")
            _store_git(root, store, *add, env=env, input=pathspec)
        return _store_git(root, store, "write-tree", env=env).stdout.strip()


def _plain(path: Path) -> bool:
    """A file or link that is not a nested repository (git would look inside one)."""
    return os.path.lexists(path) and not (path.is_dir() and os.path.lexists(path / ".git"))


@contextmanager
def _scratch(store: Path, keep: bool = False) -> Iterator[dict[str, str]]:
    """A private copy of the store's index (two sessions may snapshot at once); `keep` saves it back as the
    stat cache for the next snapshot."""
    folder = store / f"tmp-{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir()
    try:
        index = folder / "index"
        if (store / "index").exists():
            shutil.copy2(store / "index", index)
        yield {"GIT_INDEX_FILE": str(index)}
        if keep and index.exists():
            os.replace(index, store / "index")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _store_git(
    root: Path,
    store: Path,
    *args: str,
    env: dict[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    write: bool = False,
) -> subprocess.CompletedProcess[str]:
    """git on the store with `root` as its work tree; only `write` lets it change the work tree."""
    return _git(
        root,
        f"--git-dir={store}",
        f"--work-tree={root.resolve()}",
        *args,
        env=env,
        input=input,
        check=check,
        write=write,
        writable=[store],
    )


def _remove(top: Path, rel: str) -> None:
    p = top / rel
    if p.is_symlink() or p.is_file():
        p.unlink()
    parent = p.parent
    while parent != top and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent
