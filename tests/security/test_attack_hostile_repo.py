"""Issue 10, finding 4: a repository whose own config and hooks name commands. fugu's git calls run none of
them, in any permission mode, with the sandbox on, and with it off (the hardening alone holds)."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import PermissionPolicy, ToolContext, checkpoints, sandbox
from fugu_cli.tools.git import add_worktree, checkpoint, remove_worktree, worktree_diff
from fugu_cli.types import ToolResult
from tests.tools.conftest import git

Call = Callable[..., ToolResult]
HOOKS = (
    "pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "post-index-change",
    "reference-transaction", "pre-auto-gc", "post-rewrite", "fsmonitor-watchman",
)  # fmt: skip


@pytest.fixture(params=["workspace-write", "off"])
def hostile(request: pytest.FixtureRequest, repo: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The repo, armed: every way its config can name a command writes a marker (with fugu's env) outside."""
    mode = request.param
    sandbox.set_default_policy(sandbox.SandboxPolicy(mode=mode))
    markers = tmp_path / "markers"
    markers.mkdir()

    def payload(name: str) -> str:
        return f"env > {markers / name}; id >> {markers / name}"

    (repo / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    (repo / "included.cfg").write_text(f'[filter "inc"]\n\tclean = "{payload("included-clean")}"\n')
    settings = {
        "core.fsmonitor": payload("fsmonitor"),
        "core.pager": payload("pager"),
        "pager.status": payload("pager-status"),
        "pager.diff": payload("pager-diff"),
        "core.editor": payload("editor"),
        "core.askPass": payload("askpass"),
        "diff.external": payload("diff-external"),
        "filter.evil.clean": payload("clean"),
        "filter.evil.smudge": payload("smudge"),
        "filter.evil.process": payload("process"),
        "filter.evil.required": "true",
        "diff.evil.textconv": payload("textconv"),
        "diff.evil.command": payload("diff-command"),
        "merge.evil.driver": payload("merge-driver"),
        "commit.gpgSign": "true",
        "gpg.program": str(markers / "gpg-wrapper"),
        "include.path": str(repo / "included.cfg"),
        "alias.status": f"!{payload('alias')}",
        "gc.auto": "1",
    }
    for key, value in settings.items():
        git(repo, "config", key, value)
    wrapper = markers / "gpg-wrapper"
    wrapper.write_text(f"#!/bin/sh\n{payload('gpg')}\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in HOOKS:
        (hooks / hook).write_text(f"#!/bin/sh\n{payload('hook-' + hook)}\n")
        (hooks / hook).chmod(0o755)
    (repo / "README.md").write_text("# demo, changed\n")
    return repo, markers


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir() if p.name != "gpg-wrapper")


@pytest.mark.parametrize("mode", ["read-only", "ask", "full-auto"])
def test_the_git_read_tools_run_nothing_of_the_repos(
    hostile: tuple[Path, Path], call: Call, make_ctx: Callable[..., ToolContext], mode: str
) -> None:
    _repo, markers = hostile
    ctx = make_ctx(policy=PermissionPolicy(mode=mode))  # type: ignore[arg-type]
    assert " M README.md" in call("git_status", ctx=ctx).content
    assert "+# demo, changed" in call("git_diff", ctx=ctx).content
    assert "initial" in call("git_log", ctx=ctx).content
    assert "README.md" in call("glob", ctx=ctx, pattern="*.md").content
    assert "changed" in call("grep", ctx=ctx, pattern="changed").content
    assert fired(markers) == []


def test_commit_checkpoint_restore_and_worktrees_run_nothing_of_the_repos(
    hostile: tuple[Path, Path], call: Call, tmp_path: Path
) -> None:
    repo, markers = hostile
    sha = checkpoints.save(repo, "20260101-000000-abcdef-t1")
    checkpoint(repo, "20260101-000000-abcdef-wf1")
    (repo / "README.md").write_text("# overwritten\n")
    assert checkpoints.restore(repo, sha) == ["README.md"]
    assert (repo / "README.md").read_text() == "# demo, changed\n"
    result = call("git_commit", message="a commit in a hostile repo")
    assert not result.is_error, result.content
    dest = tmp_path / "fugu-home" / "worktrees" / "s" / "wf1"
    start = add_worktree(repo, dest)
    (dest / "new.txt").write_text("x\n")
    assert "new.txt" in worktree_diff(dest, start)
    remove_worktree(repo, dest)
    assert fired(markers) == []
    assert git(repo, "log", "-1", "--format=%s").strip() == "a commit in a hostile repo"


def test_the_sandbox_mode_in_force(hostile: tuple[Path, Path]) -> None:
    """Both halves of the parametrisation really ran: with the sandbox on and with it off."""
    assert sandbox.default_policy().mode in ("off", "workspace-write")
    assert os.environ.get("FUGU_HOME")
    assert dataclasses.replace(sandbox.default_policy()).allow_network is False
