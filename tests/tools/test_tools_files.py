"""read_file, write_file, edit_file against a real repository, including paths that escape it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fugu_cli.tools import ToolContext
from fugu_cli.tools.files import _edit_diff
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


# --- bytes on disk: encodings, special files, atomic writes ----------------------------------------------


def test_a_latin1_file_keeps_every_byte_an_edit_does_not_change(repo: Path, call: Call) -> None:
    original = "caf\xe9 = 1\nna\xefve = 2\n# \xa9 2024\n".encode("latin-1")
    (repo / "old.py").write_bytes(original)
    shown = call("read_file", path="old.py").content
    assert "café = 1" in shown and "encoding latin-1" in shown
    result = call("edit_file", path="old.py", old_text="naïve = 2", new_text="naïve = 3")
    assert not result.is_error, result.content
    assert (repo / "old.py").read_bytes() == original.replace(b"= 2", b"= 3")
    assert "-na\xefve = 2" in result.content and "+na\xefve = 3" in result.content
    refused = call("edit_file", path="old.py", old_text="# © 2024", new_text="# ✓")
    assert refused.is_error and "cannot hold '✓'" in refused.content
    assert (repo / "old.py").read_bytes() == original.replace(b"= 2", b"= 3")


def test_stray_bytes_in_a_utf8_file_survive_and_show_escaped(repo: Path, call: Call) -> None:
    original = b"na\xc3\xafve\nbad \xff byte\nend\n"
    (repo / "mixed.txt").write_bytes(original)
    assert "bad \\xff byte" in call("read_file", path="mixed.txt").content
    result = call("edit_file", path="mixed.txt", old_text="end", new_text="fin")
    assert not result.is_error, result.content
    assert (repo / "mixed.txt").read_bytes() == original.replace(b"end", b"fin")


def test_utf16_with_a_bom_round_trips(repo: Path, call: Call) -> None:
    original = "\ufeffhello\r\nworld\r\n".encode("utf-16-le")
    (repo / "w.txt").write_bytes(original)
    assert "world" in call("read_file", path="w.txt").content
    assert not call("edit_file", path="w.txt", old_text="world", new_text="there").is_error
    assert (repo / "w.txt").read_bytes() == "\ufeffhello\r\nthere\r\n".encode("utf-16-le")


def test_binary_files_are_refused_clearly(repo: Path, call: Call) -> None:
    (repo / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (repo / "app.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    for result in (
        call("read_file", path="app.bin"),
        call("edit_file", path="img.png", old_text="PNG", new_text="GIF"),
        call("write_file", path="img.png", content="text now"),
    ):
        assert result.is_error and "binary file" in result.content
    assert (repo / "img.png").read_bytes().startswith(b"\x89PNG")
    picture = call("read_file", path="img.png")  # a picture is read as one: for the worker, as an image
    assert not picture.is_error and [i.media_type for i in picture.images] == ["image/png"]


@pytest.mark.parametrize("tool", ["read_file", "edit_file", "write_file"])
def test_fifos_are_refused_without_hanging(repo: Path, call: Call, tool: str) -> None:
    os.mkfifo(repo / "pipe")
    args = {"read_file": {}, "edit_file": {"old_text": "a", "new_text": "b"}, "write_file": {"content": "x"}}
    result = call(tool, path="pipe", **args[tool])
    assert result.is_error and "FIFO" in result.content


def test_writes_keep_the_mode_and_leave_no_temp_files(repo: Path, call: Call) -> None:
    script = repo / "run.sh"
    script.write_text("#!/bin/sh\necho one\n")
    script.chmod(0o751)
    assert not call("edit_file", path="run.sh", old_text="one", new_text="two").is_error
    assert oct(script.stat().st_mode & 0o777) == oct(0o751) and "two" in script.read_text()
    assert not call("write_file", path="run.sh", content="#!/bin/sh\n").is_error
    assert oct(script.stat().st_mode & 0o777) == oct(0o751)
    assert sorted(p.name for p in repo.iterdir() if "fugu-tmp" in p.name) == []


def test_an_edit_through_a_symlink_keeps_the_link(repo: Path, call: Call) -> None:
    (repo / "real.txt").write_text("alpha\n")
    (repo / "link.txt").symlink_to("real.txt")
    assert not call("edit_file", path="link.txt", old_text="alpha", new_text="beta").is_error
    assert (repo / "link.txt").is_symlink() and (repo / "real.txt").read_text() == "beta\n"


def test_read_file_offset_and_limit(repo: Path, call: Call) -> None:
    (repo / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    assert call("read_file", path="f.txt", offset=4, limit=2).content == "     4\tline 4\n     5\tline 5"
    assert call("read_file", path="f.txt", offset=9, limit=50).content == "     9\tline 9\n    10\tline 10"
    assert "limit must be at least 1" in call("read_file", path="f.txt", limit=0).content
    assert "not both" in call("read_file", path="f.txt", offset=2, start_line=3).content


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "", "c c", "d"]), min_size=1, max_size=30),
    st.integers(0, 10_000),
    st.integers(1, 12),
    st.text(alphabet="xy\n", max_size=12),
    st.booleans(),
)
def test_the_edit_diff_is_a_true_patch(
    lines: list[str], at: int, length: int, replacement: str, final_newline: bool
) -> None:
    old = "\n".join(lines) + ("\n" if final_newline else "")
    start = at % len(old) if old else 0
    old_text = old[start : start + length]
    if not old_text or old.count(old_text) != 1 or old_text == replacement:
        return
    new = old.replace(old_text, replacement, 1)
    diff = _edit_diff("f", old, new, old.index(old_text), old_text)
    assert (
        apply(diff, old) == new
    )  # a true patch, line numbers included (difflib may align repeats otherwise)


def apply(diff: str, old: str) -> str:
    """Apply a unified diff the way `patch` would, checking every context and removed line."""
    source = old.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    lines = diff.splitlines(keepends=True)[2:]
    for i, line in enumerate(lines):
        if line.startswith("@@"):
            start = int(line.split()[1].split(",")[0][1:])
            count = int(line.split()[1].split(",")[1]) if "," in line.split()[1] else 1
            target = start - 1 if count else start
            out += source[at:target]
            at = target
        elif line.startswith("\\"):  # "\\ No newline at end of file": only an added line needs trimming
            if lines[i - 1].startswith("+"):
                out[-1] = out[-1].rstrip("\n")
        elif line[0] in " -":
            assert source[at].rstrip("\n") == line[1:].rstrip("\n"), (at, line)
            if line[0] == " ":
                out.append(source[at])
            at += 1
        elif line[0] == "+":
            out.append(line[1:])
    return "".join(out + source[at:])


def test_a_big_file_is_edited_with_a_small_diff(repo: Path, call: Call) -> None:
    (repo / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 200_001)))
    result = call("edit_file", path="big.txt", old_text="line 100000\n", new_text="changed\n")
    assert "@@ -99997,7 +99997,7 @@" in result.content and "+changed" in result.content
    written = call("write_file", path="big.txt", content="short\n")
    assert "whole-file diff not shown: -200000 +1 lines" in written.content
    assert "(+1 -200000)" in written.content
