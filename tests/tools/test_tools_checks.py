"""`[checks] after_edit`: the configured commands run in the sandbox on the edited files after each edit, and
what they find comes back in the edit's result, bounded, and is said to the user."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from fugu_cli.tools import EditChecks, ToolContext
from tests.tools.conftest import Call

RUFF = f"{shlex.quote(sys.executable)} -m ruff check --no-cache --isolated --output-format concise {{files}}"


def test_an_edit_that_breaks_ruff_returns_the_diagnostic(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    told: list[str] = []
    ctx = make_ctx(checks=EditChecks(commands=(RUFF,)), notify=told.append)
    broken = call("edit_file", ctx, path="src/app.py", old_text="return 1", new_text="return undefined_name")
    assert not broken.is_error  # the edit happened; the checks only report
    assert (repo / "src" / "app.py").read_text() == "def main():\n    return undefined_name\n"
    text = broken.content
    assert "Checks after this edit found problems (src/app.py):" in text
    assert "F821 Undefined name `undefined_name`" in text and "src/app.py:2:12" in text
    assert "[exit code 1]" in text
    assert told == ["Checks after this edit found problems: 1 of 1 failed (src/app.py)"]

    fixed = call("edit_file", ctx, path="src/app.py", old_text="undefined_name", new_text="2")
    assert fixed.content.endswith(
        f"Checks after this edit passed (src/app.py):\n$ {RUFF.format(files='src/app.py')}"
    )
    created = call("write_file", ctx, path="src/new.py", content="import os\n")
    assert "F401" in created.content and "src/new.py" in created.content


def test_no_checks_configured_means_the_result_is_as_before(call: Call) -> None:
    result = call("edit_file", path="src/app.py", old_text="return 1", new_text="return undefined_name")
    assert "Checks after" not in result.content and result.content.startswith("Edited src/app.py")


def test_findings_are_bounded_and_a_missing_command_says_so(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    noisy = 'for i in $(seq 1 5000); do echo "{files}: finding $i"; done; exit 1'
    ctx = make_ctx(checks=EditChecks(commands=(noisy, "no-such-linter {files}"), max_chars=1_000))
    result = call("write_file", ctx, path="a.txt", content="x\n")
    report = result.content.split("\n\n", 1)[1]
    assert len(report) < 1_300  # max_chars, plus the note of what was cut
    assert "finding 2500" not in report and "finding 5000" in report  # the end of long output is kept
    ctx = make_ctx(checks=EditChecks(commands=("no-such-linter {files}",)))
    missing = call("write_file", ctx, path="b.txt", content="y\n").content
    assert "no-such-linter: command not found" in missing and "[exit code 127]" in missing


def test_file_names_are_quoted_into_the_command(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    ctx = make_ctx(checks=EditChecks(commands=("printf '<%s>' {files}; false",)))
    result = call("write_file", ctx, path="odd $(touch pwned) name.txt", content="z\n")
    assert "<odd $(touch pwned) name.txt>" in result.content
    assert not (repo / "pwned").exists()
