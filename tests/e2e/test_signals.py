"""Stopping `fugu -p` with signals, through a real subprocess: SIGTERM, or a second Ctrl-C, kills the running
command, still writes the result and the cut step's ledger row, and exits 143 / 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import call, fugu, make_repo, tool_reply
from tests.loopback import LoopbackServer
from tests.sdk_kit import parsed, pool_file

# a unique argument finds the sleeper from outside: inside the sandbox's PID namespace its pid differs
SLEEPER = "sleep 6071 & echo started > sleeper.pid; wait"


def _sleeping() -> bool:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", b"6071"]:
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    return True
        except OSError:
            continue
    return False


def _start(repo: Path, pool: Path, *extra: str) -> subprocess.Popen[str]:
    args = ["-p", "wait", "--pool", str(pool), "--output-format", "stream-json", *extra]
    return subprocess.Popen(
        [sys.executable, "-m", "fugu_cli", *args],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip() and _sleeping():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def _gone(seconds: float = 5) -> bool:
    """The sleeper has exited (or is a zombie waiting to be reaped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _sleeping():
            return True
        time.sleep(0.05)
    return False


def _ledger(repo: Path, session_id: str) -> str:
    return fugu("sessions", "show", session_id, cwd=repo).stdout


def test_sigterm_kills_the_command_writes_the_result_and_exits_143(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("shell", command=SLEEPER, timeout_s=300)), "never"])
    proc = _start(repo, pool_file(tmp_path, loopback, "solo"), "--yes")
    _wait_for(repo / "sleeper.pid")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert time.monotonic() - started < 10
    assert _gone(), "the command's process tree outlived the stop"
    lines = parsed(out)
    raw, result = lines[-1]
    assert raw["type"] == "result" and raw["fugu_status"] == "interrupted"
    assert result.subtype == "error_during_execution" and result.terminal_reason == "aborted_tools"
    assert result.num_turns == 1 and result.duration_ms > 0
    tool = next(m for r, m in lines if r["type"] == "user").content[0]
    assert "the command and its processes were killed" in str(tool.content)
    assert "interrupted" in _ledger(repo, result.session_id)
    assert len(loopback.requests_for("solo")) == 1  # no step after the cut one


def test_ctrl_c_stops_a_running_command_and_a_second_one_changes_nothing(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("shell", command=SLEEPER, timeout_s=300)), "never"])
    proc = _start(repo, pool_file(tmp_path, loopback, "solo"), "--yes")
    _wait_for(repo / "sleeper.pid")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)  # the turn is cancelled, and its running command with it
    time.sleep(0.2)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # an impatient second one must not lose the result
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 10 and _gone()
    raw = json.loads(out.splitlines()[-1])
    assert raw["type"] == "result" and raw["subtype"] == "error_during_execution"
    assert raw["fugu_status"] == "interrupted" and raw["terminal_reason"] == "aborted_tools"
    assert "interrupted" in _ledger(repo, raw["session_id"])


def test_sigterm_while_a_worker_answers_exits_143_with_the_result(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [{"content": "too late", "delay_s": 30}])
    proc = _start(repo, pool_file(tmp_path, loopback, "solo"), "--output-format", "json")
    deadline = time.monotonic() + 60
    while not loopback.requests_for("solo") and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    result = json.loads(out)
    assert result["type"] == "result" and result["terminal_reason"] == "aborted_streaming"
    assert result["num_turns"] == 0 and result["is_error"] is True
    assert "interrupted" in _ledger(repo, result["session_id"])
    assert os.environ["FUGU_HOME"]  # the ledger read above is this test's own store
