"""Issue 22, findings 2 and 8: a sandboxed command re-pointed `.git` (a planted `commondir` with its own
config and hooks), planted worktree and filter configuration, and deleted /undo's checkpoints with
`update-ref -d` and `git gc`.

Each attack runs as a real command in the real bubblewrap sandbox, in a real repository. Afterwards the user's
own git (status, add, commit, checkout, worktree list, log) and fugu's git (its tools, /undo's checkpoints,
ultra's worktrees) must run nothing planted; the same attack run without the sandbox does plant (the control),
so each attack is real. Markers are written outside the repository, where only the host could write them."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import checkpoints
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.git import add_worktree, remove_worktree, worktree_diff
from fugu_cli.types import ToolResult
from tests.tools.conftest import git

Call = Callable[..., ToolResult]

if sb.unavailable_reason() is not None:  # the attacks need the sandbox; say so loudly rather than pass
    raise RuntimeError(f"these tests need bubblewrap: {sb.unavailable_reason()}")

_CONFIG = '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = "touch {m}/{name}-fsmonitor; false"\\n'
ATTACKS = {
    # .git/x holds a config and hooks of the attacker's; objects and refs point back; .git/commondir = x
    "commondir": (
        "mkdir -p .git/x/hooks && printf '" + _CONFIG.replace("{name}", "commondir") + "' > .git/x/config && "
        "printf '#!/bin/sh\\ntouch {m}/commondir-hook\\n' > .git/x/hooks/pre-commit && "
        "chmod +x .git/x/hooks/pre-commit && ln -s ../objects .git/x/objects && ln -s ../refs .git/x/refs && "
        "echo x > .git/commondir"
    ),
    # per-worktree config: the main worktree's config.worktree, and a worktree of the model's with its own
    "worktree": (
        "git config extensions.worktreeConfig true; "
        "printf '" + _CONFIG.replace("{name}", "worktree") + "' > .git/config.worktree; "
        "git worktree add -q --detach ../evil-wt; mkdir -p .git/worktrees/evil-wt && "
        "printf '"
        + _CONFIG.replace("{name}", "worktree-linked")
        + "' > .git/worktrees/evil-wt/config.worktree; "
        "echo ../.. > .git/worktrees/evil-wt/commondir"
    ),
    # a filter on every file: in .gitattributes, info/attributes, and its command in any config git reads
    "filter": (
        "echo '* filter=evil' > .gitattributes; mkdir -p .git/info; "
        "echo '* filter=evil' > .git/info/attributes; "
        "git config filter.evil.clean 'touch {m}/filter-clean; cat'; "
        "git config include.path ../evil.cfg; "
        "printf '[filter \"evil\"]\\n\\tclean = touch {m}/filter-include; cat\\n' > evil.cfg; "
        "printf '[filter \"evil\"]\\n\\tclean = touch {m}/filter-worktree; cat\\n' > .git/config.worktree"
    ),
    # hooks, in the hooks folder and wherever core.hooksPath could point
    "hook": (
        "for h in pre-commit post-commit post-checkout post-index-change reference-transaction; do "
        "printf '#!/bin/sh\\ntouch {m}/hook-'$h'\\n' > .git/hooks/$h; chmod +x .git/hooks/$h; done; "
        "mkdir -p hooks2 && cp .git/hooks/pre-commit hooks2/ 2>/dev/null; "
        "git config core.hooksPath hooks2"
    ),
    # a repository of the model's, recorded as a submodule: git status runs inside it, with its config
    "gitlink": (
        "mkdir sub && cd sub && git init -q && "
        "git config core.fsmonitor 'touch {m}/gitlink-fsmonitor; false' && echo s > s && git add s && "
        "git -c user.name=m -c user.email=m@x commit -qm s && cd .. && git add sub"
    ),
    # .git stops being a repository, and the tree itself looks like one (a bare layout with its config)
    "head": (
        "mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD && "
        "printf '" + _CONFIG.replace("{name}", "head") + "\\tbare = false\\n\\tworktree = .\\n' > config && "
        "echo garbage > .git/HEAD"
    ),
}


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    folder = tmp_path / "markers"
    folder.mkdir()
    return folder


def attack(name: str, markers: Path) -> str:
    return ATTACKS[name].replace("{m}", str(markers))


def the_users_git(repo: Path) -> None:
    """What the user does next, on the host: look, stage their change, commit, switch, list, log. (Not
    `git add -A`: that would add a repository the command made as a submodule; SECURITY.md says so.)"""
    (repo / "README.md").write_text("# the user's next change\n")
    for args in (
        ["status"],
        ["add", "README.md"],
        ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "next"],
        ["checkout", "-q", "-b", "feature"],
        ["worktree", "list"],
        ["log", "--oneline", "-3"],
        ["diff", "HEAD~1"],
    ):
        subprocess.run(["git", *args], cwd=repo, capture_output=True)


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_without_the_sandbox_each_attack_plants_something_the_users_git_runs(
    repo: Path, markers: Path, name: str
) -> None:
    """The control: run as the user, each attack is real."""
    subprocess.run(["bash", "-c", attack(name, markers)], cwd=repo, capture_output=True)
    the_users_git(repo)
    assert [f for f in fired(markers) if f.startswith(name)], fired(markers)


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_in_the_sandbox_no_attack_plants_anything(repo: Path, markers: Path, name: str, call: Call) -> None:
    done = sb.run(["bash", "-c", attack(name, markers)], cwd=repo, policy=sb.SandboxPolicy())
    assert done.sandboxed
    for stage in (repo / ".git").glob(".fugu-stand-in-*"):  # kept for the next command: its skeleton only
        for entry in stage.iterdir():
            empty = not any(entry.iterdir()) if entry.is_dir() else entry.stat().st_size == 0
            assert empty and not entry.is_symlink(), entry
    for planted in (
        "commondir",
        "config.worktree",
        "x",
        "worktrees/evil-wt",
        "info/attributes",
        "hooks/post-commit",
    ):
        assert not (repo / ".git" / planted).exists(), planted
    assert "extensions" not in (repo / ".git" / "config").read_text()
    if name in ("gitlink", "head"):
        assert done.notes and "was dropped" in done.notes[0]
    # fugu's own git on what the command left: its tools, /undo's checkpoint, ultra's worktree
    assert not call("git_status").is_error
    sha = checkpoints.save(repo, "20260101-000000-abcdef-t1")
    (repo / "README.md").write_text("# overwritten\n")
    assert "README.md" in checkpoints.restore(repo, sha)
    (repo / "fugu.txt").write_text("a change for fugu's commit\n")
    committed = call("git_commit", message="fugu's commit")
    assert not committed.is_error, committed.content
    dest = repo.parent / "fugu-home" / "worktrees" / "s" / "wf1"
    start = add_worktree(repo, dest)
    (dest / "new.txt").write_text("x\n")
    assert "new.txt" in worktree_diff(dest, start)
    remove_worktree(repo, dest)
    the_users_git(repo)
    assert fired(markers) == []


def test_git_still_works_in_the_sandbox_and_its_work_comes_back(repo: Path) -> None:
    (repo / "a.txt").write_text("a\n")
    script = (
        "git add a.txt && git -c user.name=m -c user.email=m@x commit -qm 'from the sandbox' && "
        "git branch topic && git tag v1 && git stash list && git checkout -q -b other && "
        "echo b > b.txt && git add b.txt && git status --short"
    )
    done = sb.run(["bash", "-c", script], cwd=repo, policy=sb.SandboxPolicy())
    assert done.exit_code == 0, done.output
    assert done.output.decode().strip() == "A  b.txt"
    assert git(repo, "log", "-1", "--format=%s").strip() == "from the sandbox"
    assert git(repo, "symbolic-ref", "--short", "HEAD").strip() == "other"  # HEAD came back
    assert git(repo, "diff", "--cached", "--name-only").strip() == "b.txt"  # and the index
    assert {"topic", "other", "main"} <= set(git(repo, "branch", "--format=%(refname:short)").split())


def test_a_linked_worktree_keeps_its_gitdir_pointers(repo: Path, markers: Path, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--detach", str(wt))
    gitdir = repo / ".git" / "worktrees" / "wt"
    before = {p.name: p.read_bytes() for p in (wt / ".git", gitdir / "commondir", gitdir / "gitdir")}
    script = (
        f"echo 'gitdir: /tmp/evil' > .git; echo {repo}/evil > {gitdir}/commondir; "
        f"printf '[core]\\n\\tfsmonitor = \"touch {markers}/wt\"\\n' > {gitdir}/config.worktree; "
        "echo b >> README.md && git -c user.name=m -c user.email=m@x commit -qam 'in the worktree'"
    )
    done = sb.run(["bash", "-c", script], cwd=wt, policy=sb.SandboxPolicy())
    after = {p.name: p.read_bytes() for p in (wt / ".git", gitdir / "commondir", gitdir / "gitdir")}
    assert after == before and not (gitdir / "config.worktree").exists()
    assert git(wt, "log", "-1", "--format=%s").strip() == "in the worktree", done.output
    the_users_git(wt)
    assert fired(markers) == []


def test_update_ref_and_gc_cannot_take_undos_checkpoint(repo: Path) -> None:
    (repo / "README.md").write_text("# uncommitted work\n")
    (repo / "draft.txt").write_text("an untracked draft\n")
    sha = checkpoints.save(repo, "20260101-000000-abcdef-t1")
    destroy = (
        "git for-each-ref --format='%(refname)' | xargs -n1 git update-ref -d; "
        "git reflog expire --expire=now --all; git gc -q --prune=now; "
        "rm -rf .git/objects/?? .git/objects/pack/*; rm -rf ./* ./.gitignore"
    )
    sb.run(["bash", "-c", destroy], cwd=repo, policy=sb.SandboxPolicy())
    assert not (repo / "README.md").exists()
    assert sorted(checkpoints.restore(repo, sha)) == ["README.md", "draft.txt", "src/app.py"]
    assert (repo / "README.md").read_text() == "# uncommitted work\n"
    assert (repo / "draft.txt").read_text() == "an untracked draft\n"
    assert (repo / "src" / "app.py").read_text() == "def main():\n    return 1\n"


def test_a_long_lived_process_sees_git_read_only(repo: Path) -> None:
    proc, sandboxed = sb.spawn(
        ["bash", "-c", "echo x > .git/commondir; echo y > .git/index; touch .git/objects/z; echo done"],
        cwd=repo,
        policy=sb.SandboxPolicy(),
    )
    out = proc.communicate(timeout=60)[0].decode()
    assert sandboxed and out.strip().endswith("done")
    assert not (repo / ".git" / "commondir").exists() and not (repo / ".git" / "objects" / "z").exists()
    assert git(repo, "status", "--short") == ""


def test_a_stand_in_left_by_a_killed_fugu_is_swept(repo: Path) -> None:
    left = repo / ".git" / ".fugu-stand-in-999999999-dead"
    left.mkdir()
    (left / "commondir").write_text("x\n")
    sb.run(["true"], cwd=repo, policy=sb.SandboxPolicy())
    assert not left.exists()


def test_fugus_worktree_bookkeeping_sees_no_credentials(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ultra's `git worktree add` sees the whole filesystem (every worktree, wherever it is): a filter that
    ran there copied ~/.ssh/id_ed25519 into the worktree. The credential files stay hidden from it too."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY MATERIAL\n")
    monkeypatch.setenv("HOME", str(home))
    done = sb.run(
        ["bash", "-c", "cat ~/.ssh/id_ed25519; ls -A /run; echo END"],
        cwd=repo,
        policy=sb.SandboxPolicy(),
        protect=False,
        whole_fs=True,
    )
    assert done.output.decode().strip().endswith("END")
    assert b"PRIVATE" not in done.output and b"lock" not in done.output  # /run is empty too


def test_a_worktree_made_again_at_the_same_place_gets_a_writable_git(repo: Path, tmp_path: Path) -> None:
    """Ultra removes a step's worktree (its git dir, stand-in and all) and may add one at the same path."""
    wt = tmp_path / "wt"
    for round in (1, 2):
        git(repo, "worktree", "add", "-q", "--detach", str(wt))
        (wt / f"r{round}.txt").write_text("x\n")
        script = f"git add r{round}.txt && git -c user.name=m -c user.email=m@x commit -qm r{round}"
        done = sb.run(["bash", "-c", script], cwd=wt, policy=sb.SandboxPolicy())
        assert done.exit_code == 0, done.output
        git(repo, "worktree", "remove", "--force", str(wt))
