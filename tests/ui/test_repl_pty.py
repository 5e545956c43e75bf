"""The real `fugu` REPL in a pseudo-terminal against loopback provider servers (pexpect types, we read)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from tests.helpers import BUGGY, FIXED, call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

PROMPT = r"fugu (\[\w+\] )?›"
SLOW = 60  # the first turn also waits for litellm's import, which is slow on a busy machine


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


@pytest.fixture
def repo(tmp_path: Path, server: LoopbackServer) -> Path:
    root = make_repo(tmp_path / "repo")
    workers = [
        {
            "name": "alpha",
            "model": "openai/alpha",
            "api_base": server.base_url,
            "priority": 2,
            "price_in": 1.0,
            "price_out": 2.0,
        },
        {
            "name": "beta",
            "model": "openai/beta",
            "api_base": server.base_url,
            "priority": 1,
            "price_in": 0.5,
            "price_out": 1.0,
        },
    ]
    write_pool(root / ".fugu-pool.toml", workers)
    (root / ".git" / "info" / "exclude").write_text(".fugu-pool.toml\n")
    return root


ESCAPES = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][0-9A-Za-z]|\x1b[=>78]|[\r\x08\x07]"
)


class Term:
    """The REPL in a pty; `expect` matches what a person would read (escape sequences removed)."""

    def __init__(self, repo: Path, *args: str, term: str = "xterm", columns: int = 100) -> None:
        env = dict(os.environ, NO_COLOR="1", TERM=term, PROMPT_TOOLKIT_NO_CPR="1")
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "fugu_cli", "--pool", ".fugu-pool.toml", *args],
            cwd=str(repo),
            env=env,
            encoding="utf-8",
            dimensions=(40, columns),
        )
        self.log = repo.parent / "pty.log"
        self.text = ""
        self.pos = 0

    def expect(self, pattern: str, timeout: float = 15) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            found = regex.search(self.text, self.pos)
            if found:
                self.pos = found.end()
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{pattern!r} not seen; the screen after the last match:\n{self.text[self.pos :]}"
                )
            try:
                raw = self.child.read_nonblocking(4096, timeout=0.1)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                if not regex.search(self.text, self.pos):
                    raise AssertionError(
                        f"{pattern!r} not seen before exit:\n{self.text[self.pos :]}"
                    ) from None
                continue
            with self.log.open("a") as f:
                f.write(raw)
            self.text += ESCAPES.sub("", raw)

    def send(self, keys: str) -> None:
        self.child.send(keys)

    def wait_raw(self, timeout: float = 15) -> None:
        """Until the prompt has switched the tty to raw mode: a key sent before that (a dumb terminal's prompt
        is printed first) is echoed by the tty in canonical mode and lost."""
        deadline = time.monotonic() + timeout
        while termios.tcgetattr(self.child.child_fd)[3] & termios.ICANON:
            if time.monotonic() > deadline:
                raise AssertionError("the prompt never switched the terminal to raw mode")
            time.sleep(0.01)

    def turn(self, text: str) -> None:
        self.expect(PROMPT)
        self.wait_raw()
        self.send(text + "\r")

    def finished(self) -> None:
        self.expect("── ", timeout=SLOW)
        self.expect(PROMPT)

    def exit_code(self) -> int:
        self.child.expect(pexpect.EOF, timeout=15)
        self.child.close()
        return int(self.child.exitstatus or 0)

    def quit(self) -> None:
        self.wait_raw()
        self.child.sendcontrol("d")
        assert self.exit_code() == 0


def db() -> sqlite3.Connection:
    return sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db")


def test_route_lines_approve_an_edit_deny_a_command_then_undo(repo: Path, server: LoopbackServer) -> None:
    server.script(
        "alpha",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "Fixed **add**: it subtracted.",
            tool_reply(call("shell", command="rm -rf build")),
            "Understood, I left build alone.",
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(call("shell", command="python3 test_calc.py --again")),
            "The test passes twice.",
        ],
    )
    child = Term(repo)
    child.turn("fix the failing test in @calc.py")
    child.expect("attached calc.py", timeout=SLOW)
    child.expect(r"↳ alpha \(p=0\.\d\d, \d+ ms, prior\)", timeout=SLOW)
    child.expect("alpha wants to edit calc.py")
    child.expect(r"\[d\]iff")
    child.send("d")  # the full diff, then the same question again
    child.expect(r"\+    return a \+ b")
    child.expect(r"\[d\]iff")
    child.send("y")
    child.expect("alpha ▸ edit calc.py")
    child.expect("Fixed add: it subtracted.")
    child.finished()
    assert (repo / "calc.py").read_text() == FIXED
    task = server.requests_for("alpha")[0].messages[-1]["content"]
    assert task.startswith("fix the failing test in @calc.py") and f'<file path="calc.py">\n{BUGGY}' in task

    child.send("clean up the build directory\r")
    child.expect("alpha wants to run")
    child.expect(r"\[d\]iff")
    child.send("n")
    child.expect("denied")
    child.expect("I left build alone")
    child.finished()
    refused = [m for m in server.requests_for("alpha")[-1].messages if m["role"] == "tool"]
    assert "Permission denied: the user declined" in refused[-1]["content"]

    child.send("run the test twice\r")
    child.expect(r"wants to run \$ python3 test_calc\.py")
    child.expect(r"\[a\]lways \(shell:python3")
    child.send("a")  # always, for this command prefix, for the rest of the session
    child.expect(r"alpha ▸ \$ python3 test_calc\.py  ✓")
    asked_before = child.text.count("wants to run")
    child.expect(r"alpha ▸ \$ python3 test_calc\.py --again  ✓")
    child.expect("The test passes twice.")
    child.finished()
    assert child.text.count("wants to run") == asked_before  # not asked again

    child.send("/undo\r")
    child.expect("restored 1 path")
    child.expect(PROMPT)
    assert (repo / "calc.py").read_text() == BUGGY
    child.quit()


def test_ctrl_c_cuts_a_slow_step_and_the_session_goes_on(repo: Path, server: LoopbackServer) -> None:
    server.script("alpha", [{"content": "too late", "delay_s": 30}, "Still here."])
    child = Term(repo)
    child.turn("take your time")
    child.expect("↳ alpha", timeout=SLOW)
    deadline = time.monotonic() + SLOW
    while not server.requests_for("alpha") and time.monotonic() < deadline:
        time.sleep(0.05)  # the slow reply is on its way (litellm may still have been importing)
    child.expect("alpha is thinking")
    started = time.monotonic()
    child.child.sendintr()
    child.expect("interrupting")
    child.expect("the session is intact")
    child.expect(PROMPT)
    assert time.monotonic() - started < 10
    child.send("are you there?\r")
    child.expect("Still here.", timeout=SLOW)
    child.finished()
    first = db().execute("SELECT id FROM sessions").fetchone()[0]
    child.send("/clear\r")
    second = child.expect(r"new session (\S+)").group(1)
    assert second != first
    child.expect(PROMPT)
    child.send("/sessions\r")
    child.expect(rf"\* {second}")
    child.expect(PROMPT)
    child.send(f"/resume {first[:-2]}\r")  # a unique prefix will do
    child.expect(f"resumed session {first}")
    child.expect("› are you there?")
    child.expect("Still here.")
    child.expect(PROMPT)
    child.send("\x03")  # Ctrl-C twice at an empty prompt exits
    child.expect("Ctrl-C again")
    child.send("\x03")
    assert child.exit_code() == 0
    statuses = [r[0] for r in db().execute("SELECT status FROM steps ORDER BY rowid")]
    assert statuses == ["interrupted", "ok"]
    turns = [r[0] for r in db().execute("SELECT status FROM turns ORDER BY turn")]
    assert turns == ["interrupted", "success"]
    last = server.requests_for("alpha")[-1].messages
    assert [m["content"] for m in last if m["role"] == "user"] == ["take your time", "are you there?"]


def test_lines_typed_during_a_turn_run_after_it_one_by_one(repo: Path, server: LoopbackServer) -> None:
    """Typed while a step runs, each Enter is kept an Enter (the tty would turn it into a line feed, which
    the prompt reads as "add a line"): the command and the task typed ahead run after the turn, in order,
    each on its own."""
    server.script("alpha", [{"content": "slow answer", "delay_s": 2}, "second answer"])
    child = Term(repo)
    child.turn("first task")
    child.expect("alpha is thinking", timeout=SLOW)
    child.send("/cost\r")
    child.send("second task\r")
    child.expect("slow answer", timeout=SLOW)
    child.expect("› /cost")
    child.expect("total")
    child.expect("› second task")
    child.expect("second answer", timeout=SLOW)
    child.finished()
    child.quit()
    asked = [[m["content"] for m in r.messages if m["role"] == "user"] for r in server.requests_for("alpha")]
    assert asked == [["first task"], ["first task", "second task"]]


def test_worker_sticks_history_survives_and_continue_resumes(repo: Path, server: LoopbackServer) -> None:
    server.script("beta", ["Beta took the first.", "Beta took the second.", "Beta again, resumed."])
    child = Term(repo)
    child.turn("/worker beta")
    child.expect("every step goes to beta")
    child.expect(r"fugu \[beta\] ›")
    child.send("first task\r")
    child.expect(r"↳ beta \(p=0\.\d\d, \d+ ms, override\)", timeout=SLOW)
    child.expect("Beta took the first.")
    child.finished()
    child.send("second task\r")
    child.expect(r"↳ beta \(.*override\)")
    child.expect("Beta took the second.")
    child.expect(r"fugu \[beta\] ›")
    child.quit()
    assert server.requests_for("alpha") == []
    history = (Path(os.environ["FUGU_HOME"]) / "history").read_text()
    assert "+first task" in history and "+second task" in history

    child = Term(repo, "--continue")
    child.expect("resumed session")
    child.expect("worker: beta")  # the sticky /worker came back with the session
    child.expect("› second task")
    child.expect("Beta took the second.")
    child.expect(r"fugu \[beta\] ›")
    child.wait_raw()
    # Up: the last line typed before the restart. prompt_toolkit loads the history file in a thread of its
    # own, and an Up before that load recalls nothing (seen twice in full runs at load 4-5): Up again until
    # the line comes
    deadline = time.monotonic() + SLOW
    while True:
        child.send("\x1b[A")
        try:
            child.expect("second task", timeout=2)
            break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
    child.send("\x03")  # Ctrl-C clears the line; Ctrl-R searches the history instead
    child.send("\x12")
    child.send("firs")
    child.expect("first task")
    child.send("\r")  # the search's line is taken...
    child.expect(r"› first task")
    child.send("\r")  # ...and sent
    child.expect("Beta again, resumed.", timeout=SLOW)
    child.finished()
    child.quit()
    sent = server.requests_for("beta")[-1].messages
    assert [m["content"] for m in sent if m["role"] == "user"] == ["first task", "second task", "first task"]
    sessions = db().execute("SELECT COUNT(*) FROM sessions").fetchone()[0]
    assert sessions == 1
    assert json.loads(db().execute("SELECT pool_json FROM sessions").fetchone()[0])[1]["name"] == "beta"


def test_startup_problems_are_one_clear_line_and_exit_2(repo: Path, tmp_path: Path) -> None:
    child = Term(repo, "--resume", "no-such-session")
    child.expect(r"fugu: cannot resume: no session no-such-session")
    assert child.exit_code() == 2

    keyed = tmp_path / "keyed.toml"
    keyed.write_text(
        '[[workers]]\nname = "k"\nmodel = "openai/gpt-5"\napi_key_env = "FUGU_TEST_NO_SUCH_KEY"\n'
    )
    env_pool = Term(repo, "--pool", str(keyed))  # the prompt shows at once; the pool is checked behind it
    env_pool.expect(PROMPT)
    env_pool.expect(r"fugu: no usable worker .*FUGU_TEST_NO_SUCH_KEY is not set")
    assert env_pool.exit_code() == 2


def test_a_dumb_narrow_terminal_still_works(repo: Path) -> None:
    child = Term(repo, term="dumb", columns=40)
    child.turn("/pool")
    child.expect(r"alpha\s+openai/alpha")
    child.expect("router: prior")
    child.turn("/wroker")
    child.expect(r"did you mean /worker\?")
    child.expect(PROMPT)
    assert "\x1b[3" not in (repo.parent / "pty.log").read_text()  # no colour codes at all
    child.wait_raw()  # a dumb terminal's prompt is printed before the tty is switched to raw mode
    child.quit()
