"""The sandbox with real bubblewrap: what a command can write, see and reach, and what dies with it."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fugu_cli.config import fugu_home
from fugu_cli.tools import sandbox as sb
from tests.tools.procs import gone_within, running, token


def sh(command: str, cwd: Path, policy: sb.SandboxPolicy | None = None, **kw: object) -> sb.Finished:
    return sb.run(["bash", "-c", command], cwd=cwd, policy=policy or sb.SandboxPolicy(), **kw)  # type: ignore[arg-type]


def text(done: sb.Finished) -> str:
    return done.output.decode()


@pytest.fixture(autouse=True)
def _fresh_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sb, "_notice", sb._Notice())


def test_workspace_write_allows_the_repo_and_a_private_tmp_only(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    done = sh(f"echo in > inside.txt; echo t > /tmp/mine; ls /tmp; echo out > {outside}; touch /etc/x", repo)
    assert done.sandboxed
    assert (repo / "inside.txt").read_text() == "in\n"
    assert not outside.exists() and not Path("/etc/x").exists()
    assert "mine" in text(done) and not Path("/tmp/mine").exists()  # /tmp inside is its own
    assert "Read-only file system" in text(done)


def test_read_only_mode_writes_nothing_but_tmp(repo: Path) -> None:
    done = sh("echo x > inside.txt; echo y > /tmp/y && cat /tmp/y", repo, sb.SandboxPolicy(mode="read-only"))
    assert not (repo / "inside.txt").exists()
    assert text(done).strip().endswith("y")


def test_git_config_and_hooks_stay_read_only_in_a_writable_repo(repo: Path) -> None:
    before = (repo / ".git" / "config").read_text()
    done = sh("echo '[core]fsmonitor = id' >> .git/config; touch .git/hooks/pre-commit; git add -A", repo)
    assert (repo / ".git" / "config").read_text() == before
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert done.exit_code == 0  # git itself still works: objects and the index are writable


def test_fugu_home_and_credential_folders_are_invisible(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fugu_home() / "fugu.db").write_text("the store")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE")
    (home / ".netrc").write_text("machine x password y")
    monkeypatch.setenv("HOME", str(home))
    command = f"ls -a {fugu_home()}; cat {fugu_home()}/fugu.db; cat ~/.ssh/id_ed25519; cat ~/.netrc; echo end"
    out = text(sh(command, repo))
    assert "the store" not in out and "PRIVATE" not in out and "password" not in out
    assert out.strip().endswith("end")


def test_the_environment_is_the_allow_list_even_through_proc(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZZ_PLAIN", "plain-value")
    monkeypatch.setenv("DB_PASSWORD", "pw-value-1")
    out = text(sh("env; for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done", repo))
    assert "PATH=" in out
    assert "plain-value" not in out and "pw-value-1" not in out and "FUGU_HOME" not in out


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(5)
    yield server.getsockname()[1]
    server.close()


def test_no_network_unless_allowed(repo: Path, listener: int) -> None:
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{listener} && echo connected"
    assert "connected" not in text(sh(probe, repo))
    allowed = sh(probe, repo, sb.SandboxPolicy(allow_network=True))
    assert "connected" in text(allowed)


@pytest.mark.parametrize("ending", ["exit", "timeout", "cancel"])
def test_everything_started_dies_with_the_command(repo: Path, ending: str) -> None:
    mark = token()
    spawn = f"setsid sleep {mark} & (sleep {mark} &) & (setsid bash -c 'sleep {mark} & disown' &) ; sleep 0.3"
    cancel = threading.Event()
    if ending == "cancel":
        threading.Timer(1.0, cancel.set).start()
    command = spawn + ("" if ending == "exit" else "; sleep 30")
    done = sh(command, repo, timeout=1.0 if ending == "timeout" else 20, cancel=cancel)
    assert done.timed_out == (ending == "timeout") and done.cancelled == (ending == "cancel")
    assert gone_within(mark, 3.0)


def test_spawn_serves_a_long_lived_process_until_killed(repo: Path) -> None:
    proc, sandboxed = sb.spawn(["cat"], cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert sandboxed and proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"ping\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"ping\n"
    sb.kill_tree(proc)
    assert proc.returncode is not None
    proc.stdin.close()
    proc.stdout.close()


def test_a_killed_command_takes_a_child_in_a_session_of_its_own_with_it(repo: Path) -> None:
    """A child that made its own session (as bwrap's sandbox does) is outside the command's process group:
    killing the command kills it too, found by its parent while the command is still there to ask."""
    mark = token()
    off = sb.SandboxPolicy(mode="off")
    proc, _ = sb.spawn(["bash", "-c", f"setsid sleep {mark} & exec sleep {mark}"], cwd=repo, policy=off)
    deadline = time.monotonic() + 30
    while len(running(mark)) < 2:
        assert time.monotonic() < deadline, running(mark)
        time.sleep(0.02)
    sb.kill_tree(proc)
    assert gone_within(mark, 3.0), running(mark)
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_sandbox_killed_as_it_starts_leaves_nothing_running(repo: Path) -> None:
    """bwrap's sandbox (pid 1 of its namespace, in a session of its own) dies with bwrap only once it has
    set itself up to: one killed in its first milliseconds left `sleep` running for good (once in 80 starts
    beside three busy loops; this test failed in 1 of 3 runs under load without the fix). Killed at once,
    30 times: nothing of any of them is left."""
    mark = token()
    for _ in range(30):
        proc, sandboxed = sb.spawn(["bash", "-c", f"sleep {mark}"], cwd=repo)
        assert sandboxed
        sb.kill_tree(proc)
        if proc.stdout is not None:
            proc.stdout.close()
    assert gone_within(mark, 3.0), running(mark)


def test_folders_under_tmp_that_a_command_needs_stay_readable(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private /tmp hides everything under /tmp but the workspace: fugu's own Python environment and the
    folders a caller names (an MCP server's script) stay visible there, read-only."""
    assert tmp_path.resolve().is_relative_to(Path("/tmp").resolve())
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "hello.sh").write_text("echo hello from $(basename $(dirname $0))\n")
    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "tool").write_text("a tool")

    def out(readable: list[Path]) -> str:
        proc, sandboxed = sb.spawn(["bash", str(tools / "hello.sh")], cwd=repo, readable=readable)
        assert sandboxed and proc.stdout is not None
        said = proc.stdout.read().decode()
        proc.wait()
        proc.stdout.close()
        return said

    assert "No such file" in out([])
    assert out([tools]) == "hello from tools\n"
    assert "No such file" in text(sh(f"cat {env}/bin/tool", repo))
    monkeypatch.setattr(sb, "_own_environment", lambda: [str(env)])
    assert text(sh(f"cat {env}/bin/tool; touch {env}/x", repo)).startswith("a tool")
    assert not (env / "x").exists()


def test_without_bwrap_one_notice_and_the_minimal_environment(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_BWRAP", str(tmp_path / "no-such-bwrap"))
    monkeypatch.setenv("SOME_TOKEN", "tok-value-1")
    done = sh("env; echo ran", repo)
    assert not done.sandboxed and "ran" in text(done) and "tok-value-1" not in text(done)
    notice = sb.take_notice()
    assert notice is not None and "sandbox off" in notice and "not" in sb.unavailable_reason()  # type: ignore[operator]
    assert sb.take_notice() is None  # once
    assert sh("true", repo).exit_code == 0 and sb.take_notice() is None


def test_sandbox_startup_costs_little(repo: Path) -> None:
    """Not a benchmark (see tools/bench_sandbox.py): a guard that a command still starts in well under 1 s."""
    started = time.monotonic()
    for _ in range(5):
        assert sh("true", repo).exit_code == 0
    assert (time.monotonic() - started) / 5 < 1.0


def test_policy_from_config_and_the_default_for_fugus_own_calls() -> None:
    from fugu_cli.config import SandboxSettings

    policy = sb.policy_from_config(SandboxSettings(mode="read-only", allow_network=True, pass_env=["X"]))
    assert policy == sb.SandboxPolicy(mode="read-only", allow_network=True, pass_env=("X",))
    assert sb.policy_from_config(SandboxSettings(hide=[])).hide == sb.DEFAULT_HIDE
    more = sb.policy_from_config(SandboxSettings(hide=["~/.secret-tool", "~/.ssh"])).hide
    assert more == (*sb.DEFAULT_HIDE, "~/.secret-tool")  # config adds to the list, never shortens it
    before = sb.default_policy()
    try:
        sb.set_default_policy(dataclasses.replace(policy, mode="off"))
        assert sb.default_policy().mode == "off"
    finally:
        sb.set_default_policy(before)
