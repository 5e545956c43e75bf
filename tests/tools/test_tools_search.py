"""glob and grep over a real tree with noise directories, binaries and symlinks."""

from __future__ import annotations

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
