"""git tools and the git library functions (checkpoints, worktrees, patches) on real repositories."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.git import (
    GitError,
    add_worktree,
    apply_patch,
    checkpoint,
    remove_worktree,
    restore_checkpoint,
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


@pytest.fixture
def dirty(repo: Path) -> Path:
    """A repo with every kind of user state: staged, unstaged, untracked, ignored, nested."""
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "gone.txt").write_text("will be deleted later\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
    (repo / "README.md").write_text("# demo\nstaged line\n")
    git(repo, "add", "README.md")
    (repo / "src/app.py").write_text("def main():\n    return 42\n")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "build.log").write_text("ignored v1\n")
    return repo


def test_checkpoint_and_restore_are_exact(dirty: Path) -> None:
    repo = dirty
    before = user_state(repo)
    sha = checkpoint(repo, "turn-1")
    assert git(repo, "rev-parse", "refs/fugu/checkpoints/turn-1").strip() == sha
    assert git(repo, "rev-parse", f"{sha}^").strip() == before[0].strip()
    assert user_state(repo) == before
    assert git(repo, "show", f"{sha}:notes.txt") == "untracked notes\n"

    (repo / "src/app.py").write_text("broken\n")
    (repo / "README.md").unlink()
    (repo / "gone.txt").unlink()
    (repo / "notes.txt").write_text("edited notes\n")
    (repo / "created.py").write_text("new\n")
    (repo / "deep/er").mkdir(parents=True)
    (repo / "deep/er/file.txt").write_text("nested new\n")
    (repo / "build.log").write_text("ignored v2\n")

    changed = restore_checkpoint(repo, sha)
    assert changed == ["README.md", "created.py", "deep/er/file.txt", "gone.txt", "notes.txt", "src/app.py"]
    assert (repo / "README.md").read_text() == "# demo\nstaged line\n"
    assert (repo / "src/app.py").read_text() == "def main():\n    return 42\n"
    assert (repo / "gone.txt").read_text() == "will be deleted later\n"
    assert (repo / "notes.txt").read_text() == "untracked notes\n"
    assert not (repo / "created.py").exists()
    assert not (repo / "deep").exists()
    assert (repo / "build.log").read_text() == "ignored v2\n"  # ignored files are left alone
    assert user_state(repo) == before
    assert restore_checkpoint(repo, sha) == []


def test_checkpoint_in_repo_without_commits(tmp_path: Path, repo: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    (fresh / "a.txt").write_text("a\n")
    sha = checkpoint(fresh, "first")
    (fresh / "a.txt").write_text("b\n")
    (fresh / "b.txt").write_text("b\n")
    assert restore_checkpoint(fresh, sha) == ["a.txt", "b.txt"]
    assert (fresh / "a.txt").read_text() == "a\n" and not (fresh / "b.txt").exists()
    assert git(fresh, "ls-files") == ""


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
