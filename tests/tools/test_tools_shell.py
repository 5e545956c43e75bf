"""The shell tool with real processes: timeouts kill the whole group, output is capped, no input waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import ToolContext
from fugu_cli.tools.shell import command_prefixes
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


def _alive(pid: int) -> bool:
    """True while `pid` runs; a zombie waiting for its reaper counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def test_runs_in_repo_root_and_reports_exit_code(repo: Path, call: Call) -> None:
    result = call("shell", command="pwd; echo oops >&2; exit 3")
    assert result.exit_code == 3
    assert not result.is_error
    assert result.content == f"{repo.resolve()}\noops\n[exit code: 3]"
    assert call("shell", command="true").content == "[no output; exit code: 0]"


def test_timeout_kills_the_whole_group_promptly(repo: Path, call: Call) -> None:
    started = time.monotonic()
    result = call("shell", command="sleep 100 & echo $! > child.pid; echo started; wait", timeout_s=1)
    elapsed = time.monotonic() - started
    assert elapsed < 1 + 3
    assert result.is_error
    assert result.exit_code == 124
    assert "started" in result.content
    assert "timed out after 1s" in result.content
    child = int((repo / "child.pid").read_text())
    assert _gone_within(child, 2.0)


def test_context_timeout_is_the_default(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    started = time.monotonic()
    result = call("shell", ctx=make_ctx(shell_timeout_s=0.5), command="sleep 30")
    assert result.is_error and time.monotonic() - started < 3.5


def test_background_leftovers_do_not_hang_the_call(repo: Path, call: Call) -> None:
    started = time.monotonic()
    result = call("shell", command="sleep 100 & echo $! > bg.pid; echo done", timeout_s=30)
    assert time.monotonic() - started < 3
    assert result.content == "done\n[exit code: 0]"
    assert _gone_within(int((repo / "bg.pid").read_text()), 2.0)


def test_output_is_capped_head_and_tail(call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    result = call("shell", ctx=make_ctx(output_cap=1000), command="seq 1 100000")
    assert len(result.content) < 1200
    assert result.content.startswith("1\n2\n3\n")
    assert "99999\n100000\n[exit code: 0]" in result.content
    assert "characters cut" in result.content
    cut = int(result.content.split("[... ")[1].split(" characters cut")[0])
    assert cut > 500_000


def test_nothing_waits_for_input(call: Call) -> None:
    started = time.monotonic()
    result = call("shell", command='read -r answer; echo "got:[$answer]"; cat; echo end', timeout_s=10)
    assert time.monotonic() - started < 3
    assert result.content == "got:[]\nend\n[exit code: 0]"
    tty = call("shell", command="echo hi > /dev/tty", timeout_s=10)
    assert tty.exit_code != 0  # no controlling terminal to prompt on


def test_secrets_are_not_passed_on(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOO_API_KEY", "sk-leak-1")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-leak-2")
    monkeypatch.setenv("MY_SECRET", "leak-3")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    result = call("shell", command="env")
    assert "leak" not in result.content
    assert "HARMLESS_SETTING=visible" in result.content


def test_bad_arguments(call: Call) -> None:
    assert "command is empty" in call("shell", command="  ").content
    assert "timeout_s must be positive" in call("shell", command="true", timeout_s=0).content


@pytest.mark.parametrize(
    ("command", "prefixes"),
    [
        ("pytest -q tests", ["shell:pytest"]),
        ("git status --short", ["shell:git status"]),
        ("git --no-pager log", ["shell:git"]),
        ("npm test", ["shell:npm test"]),
        ("/usr/bin/ls -la", ["shell:ls"]),
        ("FOO=1 make build", ["shell:make build"]),
        ("cd src && uv run pytest; ls | wc -l", ["shell:cd", "shell:uv run", "shell:ls", "shell:wc"]),
        ("echo 'a && b'", ["shell:echo"]),
        ("echo $(rm -rf x)", ["shell:echo $(rm -rf x)"]),
        ("echo 'unterminated", ["shell:echo 'unterminated"]),
    ],
)
def test_command_prefixes(command: str, prefixes: list[str]) -> None:
    assert command_prefixes(command) == prefixes
