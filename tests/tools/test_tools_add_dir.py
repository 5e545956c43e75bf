"""--add-dir: a folder beside the repository that the file tools, grep/glob and sandboxed commands reach
(writable as the repository is, by mode), its protected files guarded like the repository's, and nothing
else new."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.errors import UsageError
from fugu_cli.options import added_dir
from fugu_cli.tools import ToolContext
from tests.tools.conftest import Call


@pytest.fixture
def lib(repo: Path) -> Path:
    folder = repo.parent / "lib"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "util.py").write_text("def helper():\n    return 'lib'\n")
    other = repo.parent / "other"
    other.mkdir()
    (other / "secret.txt").write_text("not added\n")
    return folder


@pytest.fixture
def ctx_with(make_ctx: Callable[..., ToolContext], lib: Path) -> Callable[..., ToolContext]:
    return lambda mode="full-auto", **kw: make_ctx(mode, **kw).with_dirs([lib.resolve()])


def test_an_added_folder_must_exist_and_lie_outside_the_repository(repo: Path, lib: Path) -> None:
    assert added_dir(Path("../lib"), repo) == lib.resolve()
    with pytest.raises(UsageError, match=r"--add-dir \.\./nope: no such folder"):
        added_dir(Path("../nope"), repo)
    with pytest.raises(UsageError, match="inside the repository"):
        added_dir(Path("src"), repo)
    with pytest.raises(UsageError, match="add a project folder"):
        added_dir(Path("/"), repo)


def test_file_tools_read_and_edit_the_added_folder_and_nothing_else(
    repo: Path, lib: Path, call: Call, ctx_with: Callable[..., ToolContext]
) -> None:
    ctx = ctx_with()
    read = call("read_file", ctx, path="../lib/pkg/util.py")
    assert not read.is_error and "return 'lib'" in read.content
    absolute = call("read_file", ctx, path=str(lib / "pkg" / "util.py"))
    assert "return 'lib'" in absolute.content
    edited = call("edit_file", ctx, path="../lib/pkg/util.py", old_text="'lib'", new_text="'edited'")
    assert edited.content.startswith("Edited ../lib/pkg/util.py") and edited.files_touched == (
        "../lib/pkg/util.py",
    )
    assert "'edited'" in (lib / "pkg" / "util.py").read_text()
    assert call("write_file", ctx, path="../lib/new.txt", content="n\n").content.startswith(
        "Created ../lib/new.txt"
    )
    for path in ("../other/secret.txt", str(repo.parent / "other" / "secret.txt")):
        refused = call("read_file", ctx, path=path)
        assert (
            refused.is_error
            and "outside the repository" in refused.content
            and "folders added" in refused.content
        )
    assert call("write_file", ctx, path="../other/x.txt", content="x").is_error
    assert not (repo.parent / "other" / "x.txt").exists()
    # without --add-dir the folder is out of reach, as before
    assert call("read_file", path="../lib/pkg/util.py").is_error


def test_the_added_folder_s_protected_files_and_git_are_guarded(
    lib: Path, call: Call, ctx_with: Callable[..., ToolContext]
) -> None:
    (lib / ".git").mkdir()
    ctx = ctx_with()  # full-auto, and no terminal to ask
    refused = call(
        "write_file", ctx, path="../lib/.fugu/config.toml", content='permission_mode = "full-auto"\n'
    )
    assert refused.denied and not (lib / ".fugu").exists()
    in_git = call("write_file", ctx, path="../lib/.git/hooks/pre-commit", content="#!/bin/sh\n")
    assert in_git.is_error and "inside .git" in in_git.content


def test_grep_and_glob_search_the_added_folder(call: Call, ctx_with: Callable[..., ToolContext]) -> None:
    ctx = ctx_with()
    found = call("grep", ctx, pattern="def helper", path="../lib")
    assert found.content.strip() == "../lib/pkg/util.py:1: def helper():"
    assert call("glob", ctx, pattern="../lib/**/*.py").content.strip() == "../lib/pkg/util.py"
    assert call("glob", ctx, pattern="../other/*").is_error
    assert call("glob", ctx, pattern="../lib/../other/*").is_error
    assert call("glob", pattern="../lib/**/*.py").is_error  # not added: refused as before


def test_commands_in_the_sandbox_write_the_added_folder_only(
    repo: Path, lib: Path, call: Call, ctx_with: Callable[..., ToolContext]
) -> None:
    ran = call(
        "shell",
        ctx_with(),
        command="cat ../lib/pkg/util.py && echo made > ../lib/made.txt && echo no > ../other/x.txt",
    )
    assert "return 'lib'" in ran.content and (lib / "made.txt").read_text() == "made\n"
    assert ran.exit_code == 1 and not (repo.parent / "other" / "x.txt").exists()  # not even visible there
    assert "../other/x.txt: No such file or directory" in ran.content


def test_in_read_only_mode_the_added_folder_is_read_only_in_the_sandbox(lib: Path, repo: Path) -> None:
    from fugu_cli.tools import sandbox as sb

    policy = sb.SandboxPolicy(mode="read-only", extra_roots=(str(lib),))
    done = sb.run(["bash", "-c", "cat ../lib/pkg/util.py; echo x > ../lib/ro.txt"], cwd=repo, policy=policy)
    assert b"return 'lib'" in done.output and b"Read-only file system" in done.output
    assert not (lib / "ro.txt").exists()


def test_an_added_folder_shows_no_hidden_credentials_and_keeps_its_git_read_only(
    lib: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from fugu_cli.tools import sandbox as sb

    subprocess.run(["git", "init", "-q", str(lib)], check=True)
    home = lib / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE")
    (home / ".git-credentials").write_text("https://u:TOKEN@host\n")
    monkeypatch.setenv("HOME", str(home))
    policy = sb.SandboxPolicy(extra_roots=(str(lib),))
    command = (
        "cat ../lib/home/.ssh/id_ed25519 ../lib/home/.git-credentials; echo hook >> ../lib/.git/config;"
        " echo made > ../lib/made.txt; echo end"
    )
    done = sb.run(["bash", "-c", command], cwd=repo, policy=policy)
    assert done.sandboxed and done.output.strip().endswith(b"end")
    assert b"PRIVATE" not in done.output and b"TOKEN" not in done.output
    assert b"Read-only file system" in done.output and b"hook" not in (lib / ".git" / "config").read_bytes()
    assert (lib / "made.txt").read_text() == "made\n"  # the folder itself stays writable
