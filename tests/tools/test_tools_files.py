"""read_file, write_file, edit_file against a real repository, including paths that escape it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import ToolContext
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


def test_read_file_numbers_lines_and_ranges(repo: Path, call: Call) -> None:
    (repo / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    assert (
        call("read_file", path="f.txt", start_line=3, end_line=4).content == "     3\tline 3\n     4\tline 4"
    )
    assert (
        call("read_file", path="f.txt", start_line=9, end_line=99).content
        == "     9\tline 9\n    10\tline 10"
    )
    assert call("read_file", path=str(repo / "f.txt")).content.count("\n") == 9


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"path": "nope.txt"}, "nope.txt does not exist"),
        ({"path": "src"}, "src is a directory"),
        ({"path": "blob.bin"}, "binary file"),
        ({"path": "README.md", "start_line": 5}, "line 5 is past the end of README.md, which has 1 lines"),
        ({"path": "README.md", "start_line": 0}, "the first line must be >= 1"),
    ],
)
def test_read_file_errors(repo: Path, call: Call, kwargs: dict[str, object], needle: str) -> None:
    (repo / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    result = call("read_file", **kwargs)
    assert result.is_error
    assert needle in result.content


def test_read_file_caps_large_files_with_a_note(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    (repo / "big.txt").write_text("".join(f"row {i}\n" for i in range(1, 3001)))
    result = call("read_file", ctx=make_ctx(output_cap=100_000), path="big.txt")
    assert not result.is_error
    assert "  2000\trow 2000" in result.content and "row 2001" not in result.content
    assert "call read_file with offset=2001" in result.content
    rest = call("read_file", ctx=make_ctx(output_cap=100_000), path="big.txt", start_line=2001)
    assert rest.content.endswith("  3000\trow 3000")


def test_read_file_respects_output_cap(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    (repo / "wide.txt").write_text("".join(f"{i:05d} " + "x" * 90 + "\n" for i in range(1, 501)))
    result = call("read_file", ctx=make_ctx(output_cap=5000), path="wide.txt")
    assert len(result.content) <= 5000
    last = int(result.content.splitlines()[-2].split("\t")[0])
    assert f"offset={last + 1}" in result.content


def test_write_file_creates_parents_and_reports(repo: Path, call: Call) -> None:
    result = call("write_file", path="pkg/sub/mod.py", content="a = 1\nb = 2\n")
    assert result.content == "Created pkg/sub/mod.py (+2 lines)."
    assert (repo / "pkg/sub/mod.py").read_text() == "a = 1\nb = 2\n"
    again = call("write_file", path="pkg/sub/mod.py", content="a = 1\nb = 3\n")
    assert again.content.startswith("Updated pkg/sub/mod.py (+1 -1).")
    assert "-b = 2\n+b = 3" in again.content
    assert again.files_touched == ("pkg/sub/mod.py",)


def test_edit_file_returns_diff(repo: Path, call: Call) -> None:
    result = call("edit_file", path="src/app.py", old_text="    return 1\n", new_text="    return 2\n")
    assert not result.is_error
    assert result.content.startswith("Edited src/app.py (+1 -1).")
    assert "--- a/src/app.py\n+++ b/src/app.py" in result.content
    assert "-    return 1\n+    return 2" in result.content
    assert (repo / "src/app.py").read_text() == "def main():\n    return 2\n"


def test_edit_file_not_found_points_at_likely_spot(repo: Path, call: Call) -> None:
    result = call("edit_file", path="src/app.py", old_text="return 1", new_text="return 2")
    assert not result.is_error  # substring match is exact and unique
    bad_indent = call("edit_file", path="src/app.py", old_text="def main():\n  return 2", new_text="x")
    assert bad_indent.is_error
    assert "matches at line 1 if whitespace is ignored" in bad_indent.content
    assert "     2\t    return 2" in bad_indent.content
    missing = call("edit_file", path="src/app.py", old_text="no such text", new_text="x")
    assert missing.is_error and "was not found in src/app.py" in missing.content
    assert (repo / "src/app.py").read_text() == "def main():\n    return 2\n"


def test_edit_file_ambiguous_match(repo: Path, call: Call) -> None:
    (repo / "dup.py").write_text("x = 1\ny = 2\nx = 1\n")
    result = call("edit_file", path="dup.py", old_text="x = 1", new_text="x = 3")
    assert result.is_error
    assert "occurs 2 times in dup.py (starting at lines 1, 3)" in result.content
    assert "more surrounding lines" in result.content
    assert (repo / "dup.py").read_text() == "x = 1\ny = 2\nx = 1\n"


def test_edit_file_missing_file_and_noop(call: Call) -> None:
    assert "Use write_file to create" in call("edit_file", path="new.py", old_text="a", new_text="b").content
    assert "identical" in call("edit_file", path="README.md", old_text="demo", new_text="demo").content


def test_crlf_line_endings_survive_an_edit(repo: Path, call: Call) -> None:
    (repo / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    assert not call("edit_file", path="win.txt", old_text="two", new_text="2").is_error
    assert (repo / "win.txt").read_bytes() == b"one\r\n2\r\n"


@pytest.mark.parametrize("tool", ["read_file", "write_file", "edit_file"])
@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "link/secret.txt", "escape.txt"])
def test_paths_outside_the_repo_are_refused(repo: Path, call: Call, tool: str, path: str) -> None:
    outside = repo.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    os.symlink(outside, repo / "link")
    os.symlink(outside / "secret.txt", repo / "escape.txt")
    args = {
        "read_file": {},
        "write_file": {"content": "pwned"},
        "edit_file": {"old_text": "s", "new_text": "p"},
    }
    result = call(tool, path=path, **args[tool])
    assert result.is_error
    assert "outside the repository" in result.content
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert not (repo.parent / "outside.txt").exists()


def test_symlink_inside_repo_is_fine(repo: Path, call: Call) -> None:
    os.symlink(repo / "src", repo / "alias")
    assert call("read_file", path="alias/app.py").content.startswith("     1\tdef main():")


def test_git_dir_is_not_writable(repo: Path, call: Call) -> None:
    result = call("write_file", path=".git/config", content="")
    assert result.is_error and ".git" in result.content
    assert "[core]" in (repo / ".git/config").read_text()
