"""The shell tool with real processes: timeouts kill all it started, output is bounded, no input waits."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import ToolContext
from fugu_cli.tools.sandbox import SandboxPolicy
from fugu_cli.tools.shell import command_prefixes
from fugu_cli.types import ToolResult
from tests.tools.procs import gone_within, token

Call = Callable[..., ToolResult]


def test_runs_in_repo_root_and_reports_exit_code(repo: Path, call: Call) -> None:
    result = call("shell", command="pwd; echo oops >&2; exit 3")
    assert result.exit_code == 3
    assert not result.is_error
    assert result.content == f"{repo.resolve()}\noops\n[exit code: 3]"
    assert call("shell", command="true").content == "[no output; exit code: 0]"


def test_timeout_kills_everything_it_started_promptly(repo: Path, call: Call) -> None:
    mark = token()
    started = time.monotonic()
    command = f"sleep {mark} & setsid sleep {mark} & (sleep {mark} &); echo started; wait"
    result = call("shell", command=command, timeout_s=1)
    elapsed = time.monotonic() - started
    assert elapsed < 1 + 3
    assert result.is_error
    assert result.exit_code == 124
    assert "started" in result.content
    assert "timed out after 1s" in result.content
    assert gone_within(mark, 2.0)


def test_context_timeout_is_the_default(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    started = time.monotonic()
    result = call("shell", ctx=make_ctx(shell_timeout_s=0.5), command="sleep 30")
    assert result.is_error and time.monotonic() - started < 3.5


def test_background_leftovers_do_not_hang_the_call(repo: Path, call: Call) -> None:
    mark = token()
    started = time.monotonic()
    result = call("shell", command=f"sleep {mark} & echo done", timeout_s=30)
    assert time.monotonic() - started < 3
    assert result.content == "done\n[exit code: 0]"
    assert gone_within(mark, 2.0)


def test_cancel_kills_a_running_command(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    mark = token()
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    result = call("shell", ctx=make_ctx(cancel=cancel), command=f"echo begun; sleep {mark}", timeout_s=60)
    assert time.monotonic() - started < 3
    assert result.is_error and result.exit_code == 130
    assert "begun" in result.content and "cancelled" in result.content
    assert gone_within(mark, 2.0)


def test_output_is_capped_head_and_tail(call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    result = call("shell", ctx=make_ctx(output_cap=1000), command="seq 1 100000")
    assert len(result.content) < 1000
    assert result.content.startswith("1\n2\n3\n")
    assert "99999\n100000\n[exit code: 0]" in result.content
    assert "characters cut" in result.content
    cut = int(result.content.split("[... ")[1].split(" characters cut")[0])
    assert cut > 500_000


def test_the_full_output_is_kept_for_read_file(
    call: Call, make_ctx: Callable[..., ToolContext], tmp_path: Path
) -> None:
    ctx = make_ctx(output_cap=2000, output_dir=tmp_path / "outputs")
    result = call("shell", ctx=ctx, command="seq 1 100000")
    where = result.content.split("The full output is in ")[1].split(":")[0]
    assert Path(where).parent == tmp_path / "outputs"
    assert Path(where).read_text() == "".join(f"{n}\n" for n in range(1, 100001))
    page = call("read_file", ctx=ctx, path=where, offset=50000, limit=3)
    assert page.content.splitlines()[:3] == [" 50000\t50000", " 50001\t50001", " 50002\t50002"]
    assert call("read_file", ctx=ctx, path=str(tmp_path / "elsewhere.log")).is_error


def test_nothing_waits_for_input(call: Call) -> None:
    started = time.monotonic()
    result = call("shell", command='read -r answer; echo "got:[$answer]"; cat; echo end', timeout_s=10)
    assert time.monotonic() - started < 3
    assert result.content == "got:[]\nend\n[exit code: 0]"
    tty = call("shell", command="echo hi > /dev/tty", timeout_s=10)
    assert tty.exit_code != 0  # no controlling terminal to prompt on


def test_only_an_allow_listed_environment_is_passed_on(
    call: Call, make_ctx: Callable[..., ToolContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FOO_API_KEY", "sk-leak-1")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-leak-2")
    monkeypatch.setenv("MY_SECRET", "leak-3")
    monkeypatch.setenv("HARMLESS_SETTING", "leak-4")
    monkeypatch.setenv("PROJECT_FLAG", "visible")
    result = call("shell", command="env; tr '\\0' '\\n' < /proc/$PPID/environ")
    assert "leak" not in result.content
    assert "PROJECT_FLAG" not in result.content
    assert "PATH=" in result.content
    ctx = make_ctx(sandbox=SandboxPolicy(pass_env=("PROJECT_FLAG",)))
    assert "PROJECT_FLAG=visible" in call("shell", ctx=ctx, command="env").content


def test_sandbox_off_runs_unsandboxed_with_the_minimal_environment(
    call: Call, make_ctx: Callable[..., ToolContext], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_KEY", "sk-off-leak")
    outside = tmp_path / "outside.txt"
    ctx = make_ctx(sandbox=dataclasses.replace(SandboxPolicy(), mode="off"))
    result = call("shell", ctx=ctx, command=f"env; touch {outside}")
    assert "sk-off-leak" not in result.content and result.exit_code == 0
    assert outside.exists()  # off means off: the user chose it


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
        ("FOO=1 make build", ["shell:env FOO", "shell:make build"]),
        ("cd src && uv run pytest; ls | wc -l", ["shell:cd", "shell:uv run", "shell:ls", "shell:wc"]),
        ("echo 'a && b'", ["shell:echo"]),
        ("echo $(rm -rf x)", ["shell:rm", "shell:echo"]),
        ("$(echo rm) x", ["shell:echo", "shell:$(echo rm) x"]),
        ("command rm x; env A=1 rm y", ["shell:command", "shell:rm", "shell:env", "shell:env A"]),
        ("echo 'unterminated", ["shell:echo 'unterminated"]),
    ],
)
def test_command_prefixes(command: str, prefixes: list[str]) -> None:
    assert command_prefixes(command) == prefixes
