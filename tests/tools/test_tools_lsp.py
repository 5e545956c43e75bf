"""`[checks] lsp`: a real language server (python-lsp-server with pyflakes) started in the sandbox after an
edit; its diagnostics for the edited file come back in the edit's result."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from fugu_cli.tools import EditChecks, ToolContext
from tests.tools.conftest import Call

PYLSP = str(Path(sys.executable).parent / "pylsp")


def test_a_language_server_s_diagnostics_come_back_with_the_edit(
    call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    told: list[str] = []
    ctx = make_ctx(checks=EditChecks(lsp=(PYLSP,), timeout_s=120), notify=told.append)
    result = call("write_file", ctx, path="src/app.py", content="import os\n\ndef main():\n    return nope\n")
    assert not result.is_error
    report = result.content[result.content.index("\n\nChecks after") + 2 :]
    assert report.splitlines() == [
        "Checks after this edit found problems (src/app.py):",
        f"{PYLSP} (language server):",
        "src/app.py:1:1: warning: 'os' imported but unused [pyflakes]",
        "src/app.py:4:12: error: undefined name 'nope' [pyflakes]",
    ]
    assert told == ["Checks after this edit found problems: 1 of 1 failed (src/app.py)"]
    clean = call("write_file", ctx, path="src/app.py", content="def main():\n    return 1\n")
    assert clean.content.endswith(
        f"Checks after this edit passed (src/app.py):\n{PYLSP} (language server):\nno diagnostics"
    )


def test_a_language_server_that_is_not_there_is_said_and_the_edit_stands(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    ctx = make_ctx(checks=EditChecks(lsp=("no-such-language-server",), timeout_s=20))
    result = call("write_file", ctx, path="x.py", content="x = 1\n")
    assert not result.is_error and (repo / "x.py").read_text() == "x = 1\n"
    assert "no-such-language-server (language server):\n[the language server" in result.content
