"""/undo's checkpoints in fugu's own store under FUGU_HOME, on real repositories."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fugu_cli.config import fugu_home
from fugu_cli.tools import checkpoints
from fugu_cli.tools.gitrun import GitError
from tests.tools.conftest import git


def user_state(root: Path) -> tuple[str, ...]:
    """What the user's git sees: HEAD, branch, the index, the staged diff, every ref and the object count."""
    return (
        git(root, "rev-parse", "HEAD"),
        git(root, "symbolic-ref", "HEAD"),
        git(root, "ls-files", "--stage"),
        git(root, "diff", "--cached"),
        git(root, "for-each-ref"),
        git(root, "count-objects"),
    )


def test_save_and_restore_are_exact_and_leave_the_repository_alone(dirty: Path) -> None:
    repo = dirty
    before = user_state(repo)
    sha = checkpoints.save(repo, "turn-1")
    store = checkpoints.store_path(repo)
    assert store.is_relative_to(fugu_home())
    assert user_state(repo) == before  # no ref, no object, no index entry in the repository
    assert git(store, "show", f"{sha}:notes.txt") == "untracked notes\n"
    assert "build.log" not in git(store, "ls-tree", "-r", "--name-only", sha)

    (repo / "src/app.py").write_text("broken\n")
    (repo / "README.md").unlink()
    (repo / "gone.txt").unlink()
    (repo / "notes.txt").write_text("edited notes\n")
    (repo / "created.py").write_text("new\n")
    (repo / "deep/er").mkdir(parents=True)
    (repo / "deep/er/file.txt").write_text("nested new\n")
    (repo / "build.log").write_text("ignored v2\n")

    changed = checkpoints.restore(repo, sha)
    assert changed == ["README.md", "created.py", "deep/er/file.txt", "gone.txt", "notes.txt", "src/app.py"]
    assert (repo / "README.md").read_text() == "# demo\nstaged line\n"
    assert (repo / "src/app.py").read_text() == "def main():\n    return 42\n"
    assert (repo / "gone.txt").read_text() == "will be deleted later\n"
    assert (repo / "notes.txt").read_text() == "untracked notes\n"
    assert not (repo / "created.py").exists()
    assert not (repo / "deep").exists()
    assert (repo / "build.log").read_text() == "ignored v2\n"  # ignored files are left alone
    assert user_state(repo) == before
    assert checkpoints.restore(repo, sha) == []


def test_the_repositorys_own_refs_and_objects_can_all_go_and_undo_still_restores(dirty: Path) -> None:
    """What a command can do to .git (delete every ref and reflog, gc, delete the objects) takes nothing
    from the store."""
    repo = dirty
    sha = checkpoints.save(repo, "20260101-000000-abcdef-t1")
    for ref in git(repo, "for-each-ref", "--format=%(refname)").split():
        git(repo, "update-ref", "-d", ref)
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    for folder in (repo / ".git" / "objects").iterdir():
        if folder.name not in ("info", "pack"):
            subprocess.run(["rm", "-rf", str(folder)], check=True)
    for pack in (repo / ".git" / "objects" / "pack").iterdir():
        pack.unlink()
    (repo / "README.md").write_text("clobbered\n")
    (repo / "notes.txt").unlink()
    assert sorted(checkpoints.restore(repo, sha)) == ["README.md", "notes.txt"]
    assert (repo / "README.md").read_text() == "# demo\nstaged line\n"
    assert (repo / "notes.txt").read_text() == "untracked notes\n"


def test_bytes_come_back_as_they_were_whatever_the_attributes_say(repo: Path) -> None:
    """The store converts nothing: no line endings, no filter (not even one the user's own config has)."""
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    gitconfig.write_text('[filter "upper"]\n\tclean = tr a-z A-Z\n\tsmudge = tr A-Z a-z\n')
    (repo / ".gitattributes").write_text("*.txt text eol=crlf filter=upper\n")
    data = b"line one\r\nline two\nmixed\r\n\xff\xfe bytes\n"
    (repo / "data.txt").write_bytes(data)
    sha = checkpoints.save(repo, "raw")
    (repo / "data.txt").write_bytes(b"changed\n")
    assert checkpoints.restore(repo, sha) == ["data.txt"]
    assert (repo / "data.txt").read_bytes() == data


def test_a_tracked_file_that_matches_an_ignore_rule_still_counts(repo: Path) -> None:
    (repo / "local.cfg").write_text("tracked v1\n")
    git(repo, "add", "local.cfg")
    git(repo, "commit", "-q", "-m", "track it")
    (repo / ".gitignore").write_text("*.cfg\n")
    (repo / ".git" / "info" / "exclude").write_text("scratch/\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "big.bin").write_text("excluded by info/exclude\n")
    sha = checkpoints.save(repo, "t")
    (repo / "local.cfg").write_text("tracked v2\n")
    assert checkpoints.restore(repo, sha) == ["local.cfg"]
    assert (repo / "local.cfg").read_text() == "tracked v1\n"
    assert "scratch/big.bin" not in git(checkpoints.store_path(repo), "ls-tree", "-r", "--name-only", sha)


def test_a_repo_without_commits_and_a_folder_that_is_no_repo(tmp_path: Path, repo: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "a.txt").write_text("a\n")
    sha = checkpoints.save(fresh, "first")
    (fresh / "a.txt").write_text("b\n")
    (fresh / "b.txt").write_text("b\n")
    assert checkpoints.restore(fresh, sha) == ["a.txt", "b.txt"]
    assert (fresh / "a.txt").read_text() == "a\n" and not (fresh / "b.txt").exists()
    assert git(fresh, "ls-files") == ""
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError, match="not the top of a git repository"):
        checkpoints.save(plain, "x")


def test_bad_labels_and_unknown_checkpoints_are_clear_errors(repo: Path) -> None:
    with pytest.raises(GitError, match="not a valid checkpoint label"):
        checkpoints.save(repo, "bad..label")
    with pytest.raises(GitError, match="not in fugu's store"):
        checkpoints.restore(repo, "0" * 40)


def dated(repo: Path, label: str, when: int) -> None:
    """A checkpoint whose commit carries the date `when` (the session's age, as prune sees it)."""
    sha = checkpoints.save(repo, label)
    store = checkpoints.store_path(repo)
    tree = git(store, "rev-parse", f"{sha}^{{tree}}").strip()
    env = {**os.environ, "GIT_COMMITTER_DATE": f"{when} +0000", "GIT_AUTHOR_DATE": f"{when} +0000"}
    env |= {f"GIT_{who}_{what}": "t" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL")}
    argv = ["git", "commit-tree", tree, "-m", label]
    new = subprocess.run(argv, cwd=store, env=env, check=True, capture_output=True, text=True).stdout.strip()
    git(store, "update-ref", f"refs/fugu/checkpoints/{label}", new)


def test_prune_keeps_the_newest_sessions_and_drops_the_rest(repo: Path) -> None:
    sessions = [f"20260101-00000{i}-abcde{i}" for i in range(3)]  # ids as fugu made them until 2026-12-02
    sessions += [f"20260101-00000{i}-0123456789a{i}" for i in range(3, 5)]  # and as it makes them now
    for i, sid in enumerate(sessions):
        (repo / "README.md").write_text(f"# v{i}\n")
        for turn in (1, 2):
            dated(repo, f"{sid}-t{turn}", 1_700_000_000 + i * 100 + turn)
    checkpoints.save(repo, "not-a-session")
    deleted = checkpoints.prune(repo, keep_sessions=2, keep=frozenset({sessions[0]}))
    assert sorted(deleted) == sorted(f"refs/fugu/checkpoints/{s}-t{t}" for s in sessions[1:3] for t in (1, 2))
    store = checkpoints.store_path(repo)
    left = git(store, "for-each-ref", "--format=%(refname)", "refs/fugu/checkpoints/").split()
    expected = [f"refs/fugu/checkpoints/{s}-t{t}" for s in (sessions[0], *sessions[3:]) for t in (1, 2)]
    assert sorted(left) == sorted([*expected, "refs/fugu/checkpoints/not-a-session"])
    assert checkpoints.prune(repo, keep_sessions=10) == []
    assert git(store, "fsck", "--no-progress", "--no-dangling").strip() == ""
