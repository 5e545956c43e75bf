"""Background shells end to end: a dev server started with `background: true` (in the sandbox) keeps answering
while the worker takes further steps, its output is read with shell_output, and it is gone when the session
ends; the service itself keeps only the newest output and kills everything at close."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.background import BackgroundShells, ShellInfo
from fugu_cli.tools.base import ToolFailed
from tests.helpers import call, fugu, make_repo, tool_reply
from tests.loopback import LoopbackServer
from tests.sdk_kit import pool_file


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_dev_server_answers_while_the_agent_works_and_dies_with_the_session(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[sandbox]\nallow_network = true\n")
    port = _free_port()
    fetch = f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/calc.py').read())\""
    loopback.script(
        "solo",
        [
            tool_reply(
                call("shell", command=f"python3 -u -m http.server {port} --bind 127.0.0.1", background=True)
            ),
            tool_reply(call("shell_output", shell_id="bg1", wait_s=20)),
            tool_reply(call("shell", command=fetch)),
            tool_reply(call("shell_output", shell_id="bg1", wait_s=5)),
            "The server answers.",
        ],
    )
    pool = pool_file(tmp_path, loopback, "solo")
    args = ["-p", "serve the repo", "--pool", str(pool), "--permission-mode", "bypassPermissions"]
    run = fugu(*args, "--output-format", "json", cwd=repo, timeout=300)
    assert run.code == 0, run.stderr

    requests = loopback.requests_for("solo")
    results = [r.messages[-1]["content"] for r in requests[1:]]
    assert "Started in the background as bg1" in results[0]
    assert "bg1: running" in results[1] and f"Serving HTTP on 127.0.0.1 port {port}" in results[1]
    assert (
        "def add(a, b)" in results[2] and "[exit code: 0]" in results[2]
    )  # the server answered a later step
    assert "GET /calc.py" in results[3] and "bg1: running" in results[3]
    assert not _listening(port), "the dev server outlived the session"


def test_the_service_keeps_the_newest_output_and_close_kills_every_command(tmp_path: Path) -> None:
    shells = BackgroundShells(ring_bytes=1000, max_running=2)
    policy = sb.default_policy()
    noisy = shells.start("for i in $(seq 1 400); do echo line-$i; done; sleep 600", tmp_path, policy)
    quiet = shells.start("sleep 600", tmp_path, policy)
    with pytest.raises(ToolFailed, match="2 background commands are running"):
        shells.start("sleep 1", tmp_path, policy)
    total = sum(len(f"line-{i}\n") for i in range(1, 401))
    deadline = time.monotonic() + 120
    while _info(shells, noisy.id).output_bytes < total and time.monotonic() < deadline:
        time.sleep(0.05)
    text, info = shells.read(noisy.id)
    assert info.output_bytes == total and info.running
    assert text.startswith(f"[... {total - 1000} older bytes dropped") and text.endswith("line-400\n")
    assert "line-1\n" not in text and len(text.split("\n", 1)[1]) == 1000
    shells.close()
    states = {i.id: i.state for i in shells.list()}
    assert states == {noisy.id: "killed", quiet.id: "killed"}
    for pid in (noisy.pid, quiet.pid):
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid)
    with pytest.raises(ToolFailed, match="session is ending"):
        shells.start("true", tmp_path, policy)


def test_a_killed_command_is_killed_though_a_process_it_left_behind_holds_its_output(tmp_path: Path) -> None:
    """Unsandboxed, a process the command left behind (started by a subshell that has ended, in a session
    of its own: neither the command's group nor its descendant) outlives the kill and keeps the output pipe
    open, so the reader never sees its end: the command itself is dead, and says so at once (it said
    "running" for good before, and held its slot)."""
    shells = BackgroundShells(max_running=1)
    policy = dataclasses.replace(sb.default_policy(), mode="off")
    marker = tmp_path / "left.pid"
    job = shells.start(f"(setsid sh -c 'echo $$ > {marker}; exec sleep 60' &); sleep 600", tmp_path, policy)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text().strip():
        assert time.monotonic() < deadline, "the straggler never started"
        time.sleep(0.05)
    straggler = int(marker.read_text())
    try:
        info = shells.kill(job.id)
        assert info.state == "killed" and not info.running
        assert not _alive(job.pid) and _alive(straggler)
        shells.start("true", tmp_path, policy)  # its slot is free
    finally:
        os.kill(straggler, signal.SIGKILL)
        shells.close()


def _info(shells: BackgroundShells, id: str) -> ShellInfo:
    return next(i for i in shells.list() if i.id == id)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead too (its parent has not reaped it yet)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
