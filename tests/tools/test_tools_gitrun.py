"""The hardened git's reading of a repository's own config is redone whenever anything git would read for it
changes (issue 22: a cache keyed on .git/config's mtime let a filter planted through `commondir` run in
fugu's checkpoint, commit and /undo). The sandbox is off here: the hardening alone must hold."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fugu_cli.tools import checkpoints
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.git import checkpoint
from fugu_cli.tools.gitrun import git as hardened
from fugu_cli.tools.gitrun import neutralizers
from fugu_cli.types import ToolResult
from tests.tools.conftest import git

Call = Callable[..., ToolResult]


@pytest.fixture(autouse=True)
def _no_sandbox() -> Iterator[None]:
    before = sb.default_policy()
    sb.set_default_policy(sb.SandboxPolicy(mode="off"))
    yield
    sb.set_default_policy(before)


def filter_config(markers: Path, name: str) -> str:
    payload = f'"touch {markers}/{name}; cat"'
    return f'[filter "evil"]\n\tclean = {payload}\n\tsmudge = {payload}\n'


def everything_fugu_does(repo: Path, call: Call) -> None:
    (repo / "README.md").write_text("# changed\n")
    assert not call("git_status").is_error
    sha = checkpoints.save(repo, "20260101-000000-abcdef-t1")
    checkpoint(repo, "20260101-000000-abcdef-wf1")
    (repo / "README.md").write_text("# changed again\n")
    checkpoints.restore(repo, sha)
    result = call("git_commit", message="commit")
    assert not result.is_error, result.content


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def test_a_commondir_planted_after_the_first_reading_is_read(repo: Path, markers: Path, call: Call) -> None:
    (repo / ".gitattributes").write_text("* filter=evil\n")
    assert neutralizers(repo) == ()  # read once: nothing to empty yet
    planted = repo / ".git" / "x"
    planted.mkdir()
    identity = "[user]\n\tname = Dev\n\temail = dev@example.com\n"
    (planted / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n" + identity + filter_config(markers, "x")
    )
    for name in ("objects", "refs", "HEAD", "index", "info"):
        (planted / name).symlink_to(repo / ".git" / name)
    (repo / ".git" / "commondir").write_text("x\n")  # .git/config itself is untouched
    assert "filter.evil.clean=" in neutralizers(repo)
    everything_fugu_does(repo, call)
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize("condition", ["include.path", "includeIf.onbranch:evil.path"])
def test_an_included_file_that_appears_later_is_read(
    repo: Path, markers: Path, call: Call, condition: str
) -> None:
    (repo / ".gitattributes").write_text("* filter=evil\n")
    git(repo, "config", condition, "../later.cfg")
    assert neutralizers(repo) == ()
    assert neutralizers(repo) == ()  # the second reading knows the included file it must watch
    (repo / "later.cfg").write_text(filter_config(markers, "later"))
    if "onbranch" in condition:
        assert neutralizers(repo) == ()  # not on that branch: git does not read it
        git(repo, "checkout", "-q", "-b", "evil")
    assert "filter.evil.clean=" in neutralizers(repo)
    everything_fugu_does(repo, call)
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_submodules_own_filter_never_runs(repo: Path, markers: Path, call: Call) -> None:
    """`git add` checks a submodule by running git inside it, with the submodule's config."""
    sub = repo / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    (sub / ".gitattributes").write_text("* filter=evil\n")
    (sub / "s.txt").write_text("s\n")
    git(sub, "add", "-A")
    git(sub, "-c", "user.name=s", "-c", "user.email=s@x", "commit", "-qm", "s")
    with (sub / ".git" / "config").open("a") as f:
        f.write(filter_config(markers, "sub"))
    git(repo, "add", "sub")
    git(repo, "commit", "-qm", "a submodule")
    (sub / "s.txt").write_text("s, changed in the same second as its index\n")
    everything_fugu_does(repo, call)
    assert hardened(repo, "ls-files", "-s", "sub").stdout.startswith("160000")
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_repository_inside_the_tree_is_never_added_by_fugu(repo: Path, call: Call) -> None:
    nested = repo / "cloned"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "f.txt").write_text("f\n")
    git(nested, "add", "-A")
    git(nested, "-c", "user.name=s", "-c", "user.email=s@x", "commit", "-qm", "f")
    (repo / "mine.txt").write_text("mine\n")
    result = call("git_commit", message="mine")
    assert not result.is_error, result.content
    assert git(repo, "ls-files", "-s").count("160000") == 0
    assert "mine.txt" in git(repo, "ls-files")
