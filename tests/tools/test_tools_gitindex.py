"""Reading the submodule entries of a git index without git, checked against what git itself lists, for every
index format git writes: versions 2, 3 (an intent-to-add entry's extended flags) and 4, a split index."""

from __future__ import annotations

from pathlib import Path

import pytest

from fugu_cli.tools import gitindex
from tests.tools.conftest import git


def gitlinks_by_git(repo: Path) -> set[str]:
    lines = git(repo, "ls-files", "-s", "-z").split("\0")
    return {line.split("\t", 1)[1] for line in lines if line.startswith("160000 ")}


@pytest.mark.parametrize("version", ["2", "3", "4"])
@pytest.mark.parametrize("split", [False, True])
def test_gitlinks_as_git_lists_them(repo: Path, version: str, split: bool) -> None:
    for name in ("vendor/lib-a", "z-last", "deep/er/nested-b"):
        sub = repo / name
        sub.mkdir(parents=True)
        git(sub, "init", "-q")
        (sub / "f").write_text("f\n")
        git(sub, "add", "f")
        git(sub, "-c", "user.name=s", "-c", "user.email=s@x", "commit", "-qm", "f")
        git(repo, "add", name)
    for i in range(30):  # enough paths that v4's prefix compression matters
        (repo / "src" / f"module_{i:02d}_with_a_long_shared_prefix.py").write_text(f"x = {i}\n")
    git(repo, "add", "-A")
    (repo / "intent.txt").write_text("i\n")
    git(repo, "add", "-N", "intent.txt")  # an extended-flags entry
    git(repo, "update-index", f"--index-version={version}")
    if split:
        git(repo, "update-index", "--split-index")
        (repo / "later.txt").write_text("l\n")
        git(repo, "add", "later.txt")
    index = repo / ".git" / "index"
    found = gitindex.gitlinks(index, gitindex.hash_size(repo / ".git"), shared_dir=index.parent)
    assert found == gitlinks_by_git(repo) == {"vendor/lib-a", "z-last", "deep/er/nested-b"}


def test_a_file_that_is_no_index_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "index").write_bytes(b"not an index at all, just bytes")
    with pytest.raises(ValueError):
        gitindex.gitlinks(tmp_path / "index")
