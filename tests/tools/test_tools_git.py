"""git tools and the git library functions (worktrees, their base checkpoints, patches), on real repos."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.git import (
    GitError,
    add_worktree,
    apply_patch,
    checkpoint,
    prune_checkpoints,
    remove_stale_worktrees,
    remove_worktree,
    stale_worktrees,
    worktree_diff,
)
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def user_state(root: Path) -> tuple[str, str, str, str]:
    """What the user's git sees: HEAD, branch, the index (staged entries) and staged diff."""
    return (
        git(root, "rev-parse", "HEAD"),
        git(root, "symbolic-ref", "HEAD"),
        git(root, "ls-files", "--stage"),
        git(root, "diff", "--cached"),
    )


# --- tools ---------------------------------------------------------------------------------------------


def test_git_status_diff_log(repo: Path, call: Call) -> None:
    assert call("git_status").content == "## main\nNothing to commit, working tree clean."
    assert call("git_diff").content == "No uncommitted changes."
    (repo / "README.md").write_text("# demo\nmore\n")
    (repo / "new.txt").write_text("n\n")
    assert call("git_status").content == "## main\n M README.md\n?? new.txt"
    diff = call("git_diff").content
    assert "+more" in diff and diff.endswith("Untracked files:\nnew.txt")
    assert call("git_diff", path="src").content == "No uncommitted changes."
    assert call("git_diff", path="../x").is_error
    log = call("git_log", n=5).content
    assert log.endswith("Dev: initial") and log.count("\n") == 0
    assert call("git_log", n=0).is_error


def test_git_commit_stages_everything(repo: Path, call: Call) -> None:
    (repo / "README.md").write_text("# changed\n")
    (repo / "added.py").write_text("x = 1\n")
    result = call("git_commit", message="Change readme\n\nAnd add a module.")
    assert not result.is_error
    assert result.content.startswith("Committed ") and "Change readme" in result.content
    assert set(result.files_touched) == {"README.md", "added.py"}
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "log", "-1", "--format=%B").strip() == "Change readme\n\nAnd add a module."
    again = call("git_commit", message="empty")
    assert again.is_error and "Nothing to commit" in again.content
    assert call("git_commit", message="  ").is_error


def test_git_tools_outside_a_repo(tmp_path: Path, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    ctx = ToolContext(root=plain, agent="tester", policy=PermissionPolicy(mode="full-auto"))
    for name, args in [
        ("git_status", {}),
        ("git_diff", {}),
        ("git_log", {}),
        ("git_commit", {"message": "m"}),
    ]:
        result = call(name, ctx=ctx, **args)
        assert result.is_error and "not inside a git repository" in result.content


# --- checkpoints ---------------------------------------------------------------------------------------


def test_a_worktree_base_checkpoint_is_a_commit_in_the_repo_and_touches_nothing_else(dirty: Path) -> None:
    repo = dirty
    before = user_state(repo)
    sha = checkpoint(repo, "turn-1")
    assert git(repo, "rev-parse", "refs/fugu/checkpoints/turn-1").strip() == sha
    assert git(repo, "rev-parse", f"{sha}^").strip() == before[0].strip()
    assert user_state(repo) == before
    assert git(repo, "show", f"{sha}:notes.txt") == "untracked notes\n"
    assert "build.log" not in git(repo, "ls-tree", "-r", "--name-only", sha)


def test_checkpoint_rejects_bad_labels(repo: Path) -> None:
    with pytest.raises(GitError, match="not a valid checkpoint label"):
        checkpoint(repo, "bad..label")


# --- worktrees and patches -----------------------------------------------------------------------------


def test_worktree_sees_user_changes_and_its_diff_applies(dirty: Path, tmp_path: Path) -> None:
    repo = dirty
    dest = tmp_path / "wt"
    base = add_worktree(repo, dest)
    assert (dest / "src/app.py").read_text() == "def main():\n    return 42\n"
    assert (dest / "notes.txt").read_text() == "untracked notes\n"
    assert not (dest / "build.log").exists()
    head_before = user_state(repo)

    (dest / "src/app.py").write_text("def main():\n    return 43\n")
    (dest / "gone.txt").unlink()
    (dest / "pkg").mkdir()
    (dest / "pkg/new.py").write_text("VALUE = 1\n")
    (dest / "logo.bin").write_bytes(bytes(range(256)) * 4)
    patch = worktree_diff(dest, base)
    assert "GIT binary patch" in patch
    assert "pkg/new.py" in patch

    ok, message = apply_patch(repo, patch)
    assert ok, message
    assert "src/app.py" in message
    assert (repo / "src/app.py").read_text() == "def main():\n    return 43\n"
    assert not (repo / "gone.txt").exists()
    assert (repo / "pkg/new.py").read_text() == "VALUE = 1\n"
    assert (repo / "logo.bin").read_bytes() == bytes(range(256)) * 4
    assert user_state(repo) == head_before

    remove_worktree(repo, dest)
    assert not dest.exists()
    assert git(repo, "worktree", "list").count("\n") == 1


def test_worktree_at_explicit_base(repo: Path, tmp_path: Path) -> None:
    (repo / "README.md").write_text("uncommitted\n")
    dest = tmp_path / "wt2"
    base = add_worktree(repo, dest, base="HEAD")
    assert base == git(repo, "rev-parse", "HEAD").strip()
    assert (dest / "README.md").read_text() == "# demo\n"
    assert worktree_diff(dest, base) == ""
    assert apply_patch(repo, "") == (True, "Nothing to apply: the patch is empty.")
    remove_worktree(repo, dest)


def test_conflicting_patch_leaves_user_files_alone(repo: Path, tmp_path: Path) -> None:
    dest = tmp_path / "wt3"
    base = add_worktree(repo, dest)
    (dest / "src/app.py").write_text("def main():\n    return 'worktree'\n")
    (dest / "extra.txt").write_text("from the worktree\n")
    patch = worktree_diff(dest, base)
    (repo / "src/app.py").write_text("def main():\n    return 'user'\n")
    before = (repo / "src/app.py").read_bytes()

    ok, message = apply_patch(repo, patch)
    assert not ok
    assert "does not apply" in message and "src/app.py" in message
    assert (repo / "src/app.py").read_bytes() == before
    assert not (repo / "extra.txt").exists()
    remove_worktree(repo, dest)


# --- cleanup: old sessions' checkpoints, worktrees of killed runs -------------------------------------------


def dated(repo: Path, label: str, when: int) -> None:
    """A checkpoint whose commit carries the date `when` (the session's age, as prune sees it)."""
    sha = checkpoint(repo, label)
    tree = git(repo, "rev-parse", f"{sha}^{{tree}}").strip()
    env = {**os.environ, "GIT_COMMITTER_DATE": f"{when} +0000", "GIT_AUTHOR_DATE": f"{when} +0000"}
    new = subprocess.run(
        ["git", "commit-tree", tree, "-m", label],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    git(repo, "update-ref", f"refs/fugu/checkpoints/{label}", new)


def test_prune_checkpoints_keeps_the_newest_sessions(repo: Path) -> None:
    sessions = [f"20260101-00000{i}-abcde{i}" for i in range(5)]
    for i, sid in enumerate(sessions):
        (repo / "README.md").write_text(f"# v{i}\n")
        for turn in (1, 2):
            dated(repo, f"{sid}-t{turn}", 1_700_000_000 + i * 100 + turn)
    checkpoint(repo, "worktree-elsewhere")
    deleted = prune_checkpoints(repo, keep_sessions=2, keep=frozenset({sessions[0]}))
    assert sorted(deleted) == sorted(f"refs/fugu/checkpoints/{s}-t{t}" for s in sessions[1:3] for t in (1, 2))
    left = git(repo, "for-each-ref", "--format=%(refname)", "refs/fugu/checkpoints/").split()
    expected = [f"refs/fugu/checkpoints/{s}-t{t}" for s in (sessions[0], *sessions[3:]) for t in (1, 2)]
    assert sorted(left) == sorted([*expected, "refs/fugu/checkpoints/worktree-elsewhere"])
    assert prune_checkpoints(repo, keep_sessions=10) == []


def test_worktrees_of_a_killed_run_are_removed_and_a_live_runs_kept(repo: Path, tmp_path: Path) -> None:
    home = tmp_path / "fugu-home" / "worktrees"
    dead, live = home / "20260101-000000-dead00", home / "20260101-000000-live00"
    add_worktree(repo, dead / "wf1" / "s0")
    add_worktree(repo, live / "wf1" / "s0")
    (dead / "wf1" / "s0" / "scratch.txt").write_text("left behind\n")
    code = (
        "import sys, time; from pathlib import Path; from fugu_cli.tools.git import hold_worktrees\n"
        "with hold_worktrees(Path(sys.argv[1])):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    killed = subprocess.Popen([sys.executable, "-c", code, str(dead)], stdout=subprocess.PIPE, text=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(live)], stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout is not None and killed.stdout.readline() == "held\n"
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert stale_worktrees(repo, home) == []
        killed.kill()  # kill -9: no cleanup ran
        killed.wait()
        assert stale_worktrees(repo, home) == [(dead / "wf1" / "s0").resolve()]
        removed = remove_stale_worktrees(repo, home)
        assert removed == [(dead / "wf1" / "s0").resolve()]
        assert not dead.exists() and (live / "wf1" / "s0" / "README.md").exists()
        listed = git(repo, "worktree", "list", "--porcelain")
        assert str(dead) not in listed and str(live / "wf1" / "s0") in listed
    finally:
        for proc in (killed, holder):
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
