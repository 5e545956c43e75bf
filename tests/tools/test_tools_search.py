"""glob and grep over a real tree with noise directories, binaries and symlinks."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import ToolContext, search
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


@pytest.fixture
def tree(repo: Path) -> Path:
    for rel, text in {
        "src/util.py": "import os\n# TODO: tidy\n",
        "src/pkg/core.py": "def run():\n    pass  # TODO later\n",
        "docs/guide.md": "TODO in docs\n",
        "node_modules/lib/index.js": "// TODO vendored\n",
        ".venv/lib/site.py": "# TODO venv\n",
        "src/__pycache__/util.cpython-311.pyc": "TODO cache\n",
    }.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    (repo / "src/image.bin").write_bytes(b"TODO\x00\x01binary")
    return repo


def test_glob_sorted_relative_and_skips_noise(tree: Path, call: Call) -> None:
    assert call("glob", pattern="**/*.py").content == "src/app.py\nsrc/pkg/core.py\nsrc/util.py"
    assert call("glob", pattern="src/*").content == ("src/app.py\nsrc/image.bin\nsrc/pkg/\nsrc/util.py")
    assert ".git" not in call("glob", pattern="**").content
    assert call("glob", pattern="node_modules/**/*.js").content == "node_modules/lib/index.js"
    assert call("glob", pattern="./docs/*.md").content == "docs/guide.md"
    assert call("glob", pattern="src/[cu]*.py").content == "src/util.py"


def test_glob_no_match_hint_and_bad_patterns(tree: Path, call: Call) -> None:
    assert "Use '**/core.py'" in call("glob", pattern="core.py").content
    assert call("glob", pattern="../*").is_error
    assert call("glob", pattern="/etc/*").is_error


def test_glob_caps_results(repo: Path, call: Call) -> None:
    (repo / "many").mkdir()
    for i in range(search.MAX_GLOB_RESULTS + 20):
        (repo / "many" / f"f{i:04d}.txt").write_text("")
    result = call("glob", pattern="many/*.txt")
    assert result.content.count("\n") == search.MAX_GLOB_RESULTS
    assert result.content.endswith("[20 more matches not shown; use a narrower pattern]")


def test_grep_finds_lines_and_skips_noise(tree: Path, call: Call) -> None:
    assert call("grep", pattern=r"TODO").content == (
        "docs/guide.md:1: TODO in docs\n"
        "src/pkg/core.py:2:     pass  # TODO later\n"
        "src/util.py:2: # TODO: tidy"
    )
    assert call("grep", pattern=r"^def \w+", path="src/pkg").content == "src/pkg/core.py:1: def run():"
    assert call("grep", pattern="import", path="src/util.py").content == "src/util.py:1: import os"
    assert "No matches" in call("grep", pattern="zebra").content


def test_grep_errors(tree: Path, call: Call) -> None:
    bad = call("grep", pattern="(unclosed")
    assert bad.is_error and "Invalid regular expression" in bad.content
    assert call("grep", pattern="x", path="../").is_error
    assert "does not exist" in call("grep", pattern="x", path="missing").content


def test_grep_caps_matches(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    (repo / "lots.txt").write_text("hit\n" * (search.MAX_GREP_MATCHES + 5))
    result = call("grep", pattern="hit")
    assert result.content.count("lots.txt:") == search.MAX_GREP_MATCHES
    assert result.content.endswith("[5 more matches not shown; narrow the pattern or the path]")


# --- what git ignores, runaway patterns, odd names ----------------------------------------------------------


@pytest.fixture
def ignoring(repo: Path) -> Path:
    """A repo whose .gitignore hides build/ (100 files that match everything) and *.log."""
    (repo / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (repo / "build").mkdir()
    for i in range(100):
        (repo / "build" / f"gen{i}.py").write_text("# TODO generated\n")
    (repo / "debug.log").write_text("TODO in a log\n")
    (repo / "keep.log").write_text("TODO kept\n")
    (repo / "src" / "work.py").write_text("# TODO real\n")
    return repo


def test_glob_and_grep_skip_what_git_ignores(ignoring: Path, call: Call) -> None:
    assert call("glob", pattern="**/*.py").content == "src/app.py\nsrc/work.py"
    assert call("glob", pattern="*.log").content == "keep.log"
    assert call("grep", pattern="TODO").content == "keep.log:1: TODO kept\nsrc/work.py:1: # TODO real"


def test_an_ignored_folder_named_explicitly_is_searched(ignoring: Path, call: Call) -> None:
    assert call("grep", pattern="TODO", path="build").content.count("build/gen") == 100
    assert call("glob", pattern="build/gen1?.py").content.count("\n") == 9


def test_a_tracked_file_counts_even_if_a_rule_ignores_it(ignoring: Path, call: Call) -> None:
    (ignoring / "build" / "committed.py").write_text("# TODO committed\n")
    subprocess.run(["git", "add", "-f", "build/committed.py"], cwd=ignoring, check=True)
    assert "build/committed.py:1: # TODO committed" in call("grep", pattern="TODO").content


def test_outside_git_the_gitignore_files_still_count(
    tmp_path: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    plain = tmp_path / "plain"
    (plain / "out").mkdir(parents=True)
    (plain / ".gitignore").write_text("out/\n")
    (plain / "out" / "x.txt").write_text("needle\n")
    (plain / "y.txt").write_text("needle\n")
    ctx = dataclasses.replace(make_ctx(), root=plain)
    assert call("grep", ctx=ctx, pattern="needle").content == "y.txt:1: needle"


def test_a_catastrophic_pattern_is_stopped_quickly(repo: Path, call: Call) -> None:
    (repo / "evil.txt").write_text("a" * 5000 + "!\n")
    started = time.monotonic()
    result = call("grep", pattern=r"(a+)+$")
    assert time.monotonic() - started < search.SLICE_S + 3
    assert "search stopped" in result.content and "catastrophic" in result.content


def test_grep_stops_when_the_turn_is_cancelled(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    for i in range(30):
        (repo / f"evil{i}.txt").write_text("a" * 5000 + "!\n")
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    started = time.monotonic()
    result = call("grep", ctx=make_ctx(cancel=cancel), pattern=r"(a|aa)+$")
    assert time.monotonic() - started < search.SLICE_S + 3
    assert "search stopped" in result.content


def test_non_utf8_file_names_are_shown_escaped(repo: Path, call: Call) -> None:
    raw = os.fsencode(str(repo)) + b"/caf\xe9.txt"
    with open(raw, "wb") as f:
        f.write(b"needle\n")
    listed = call("glob", pattern="*.txt")
    assert not listed.is_error and listed.content == "caf\\xe9.txt"
    found = call("grep", pattern="needle")
    assert found.content == "caf\\xe9.txt:1: needle"
    json.dumps(found.content).encode("utf-8")  # safe to send to a provider


def test_grep_skips_binaries_and_fifos(repo: Path, call: Call) -> None:
    (repo / "blob.bin").write_bytes(b"needle\x00\x01")
    os.mkfifo(repo / "pipe")
    (repo / "text.txt").write_text("needle\n")
    assert call("grep", pattern="needle").content == "text.txt:1: needle"
