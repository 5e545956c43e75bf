"""MCP servers in a session (in process, a scripted LLM, a real server): started lazily, stopped with the
session, their calls in ultra mode kept to the step that made them; MCP rules in the permission policy."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.tools import PermissionPolicy
from tests.conductor.kit import tc, write_plan
from tests.helpers import make_repo, processes, tool_reply, write_pool

NOTES = str(Path(__file__).with_name("notes_server.py"))


def _session(tmp_path: Path, llm: ScriptedLLM, **opts: Any) -> Session:
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
    )
    repo = tmp_path / "repo"
    if not repo.exists():
        make_repo(repo)
    names = ["alpha", "beta", "gamma"]
    pool = write_pool(
        tmp_path / "pool.toml",
        [{"name": n, "model": f"openai/{n}", "priority": 3 - i} for i, n in enumerate(names)],
    )
    return build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto", **opts), llm=llm)


def _descends_from_us(pid: str) -> bool:
    """Whether process PID is this test process or one of its descendants (other pytest workers run the
    same server at the same time, and their servers are not this session's)."""
    me = str(os.getpid())
    for _ in range(64):
        if pid == me:
            return True
        try:
            stat = (Path("/proc") / pid / "stat").read_text()
        except OSError:
            return False
        pid = stat.rsplit(")", 1)[1].split()[1]  # the field after the state is the parent's pid
        if pid in ("0", "1"):
            return False
    return False


def _servers_running() -> list[str]:
    """Command lines of live processes, started by this test process, running notes_server.py."""
    # through `processes`, which reads any command line: another test's `fugu -p` may be running with an
    # argument that is not UTF-8 (tests/e2e/test_messages.py), and a strict decode failed this test
    return [
        cmdline
        for pid, cmdline in processes()
        if NOTES in cmdline and "bwrap" not in cmdline and _descends_from_us(str(pid))
    ]


def test_servers_start_on_first_use_and_stop_with_the_session(tmp_path: Path) -> None:
    first = _session(tmp_path, ScriptedLLM(["hello"]))
    first.run_turn("hi")  # no catalog kept yet: the first list of tools starts the server
    assert first.mcp_servers() == (("notes", "connected"),) and _servers_running()
    first.close()
    assert first.mcp_servers() == (("notes", "stopped"),)
    assert not _servers_running()

    llm = ScriptedLLM([tool_reply(tc("c1", "mcp__notes__add", a=20, b=22)), "42"])
    second = _session(tmp_path, ScriptedLLM(["hi again"]))
    second.run_turn("hi")
    assert second.mcp_servers() == (("notes", "pending"),)  # its tools came from the kept catalog
    assert "mcp__notes__add" in [t["function"]["name"] for t in second.deps.agent.tools.schemas()]
    assert not _servers_running()
    second.close()

    third = _session(tmp_path, llm)
    third.run_turn("add them")
    assert third.mcp_servers() == (("notes", "connected"),)  # the call started it
    assert [m.content for m in llm.calls[-1].messages if m.role == "tool"] == ["42"]
    third.close()
    assert not _servers_running()


def test_ultra_steps_keep_their_mcp_calls_to_themselves(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"worker": "alpha", "subtask": "look up the release note", "access": []},
            {"worker": "beta", "subtask": "count the files", "access": []},
            {"worker": "gamma", "subtask": "write the summary", "access": [0]},
        ],
    )
    llm = ScriptedLLM(
        {
            "alpha": [tool_reply(tc("a1", "mcp__notes__lookup", key="release")), "Step 0: release noted."],
            "beta": ["Step 1: two files."],
            "gamma": ["Summary written."],
        }
    )
    session = _session(tmp_path, llm, ultra=True, plan=plan)
    result = session.run_turn("prepare the release")
    assert result.status == "success", result.error
    by_worker: dict[str, str] = {}
    for c in llm.calls:
        by_worker[c.worker] = " ".join(m.content or "" for m in c.messages)
    assert "the release is on Friday" in by_worker["alpha"]  # the tool's result reached the step that called
    assert (
        "the release is on Friday" not in by_worker["beta"]
    )  # a step without access to step 0 never sees it
    assert (
        "Step 0: release noted." in by_worker["gamma"]
        and "the release is on Friday" not in by_worker["gamma"]
    )
    rows = session.deps.store.query("SELECT scope, agent, tool FROM tool_calls ORDER BY rowid")
    assert [(r["scope"], r["agent"], r["tool"]) for r in rows] == [("wf1.s0", "alpha", "mcp__notes__lookup")]
    session.close()


def test_mcp_rules_match_a_server_or_one_tool() -> None:
    policy = PermissionPolicy(mode="ask", allow=["mcp__notes"], deny=["mcp__notes__crash", "mcp__time__*"])
    assert policy.check("exec", "mcp__notes__add") == "allow"
    assert policy.check("exec", "mcp__notes__crash") == "deny"
    assert policy.check("exec", "mcp__time__get_current_time") == "deny"
    assert policy.check("exec", "mcp__notesx__add") == "ask"  # a prefix of a name is not the server
    assert PermissionPolicy(mode="ask", allow=["mcp"]).check("exec", "mcp__any__tool") == "allow"
    assert PermissionPolicy(mode="read-only", allow=["mcp__notes"]).check("exec", "mcp__notes__add") == "deny"


def test_the_sdk_is_imported_only_when_a_server_starts(tmp_path: Path) -> None:
    """`fugu --help`, and a session whose server's catalog is known, load no `mcp` module until a call."""
    import subprocess

    first = _session(tmp_path, ScriptedLLM(["hi"]))
    first.run_turn("hi")  # keeps the catalog
    first.close()
    repo, pool = str(tmp_path / "repo"), str(tmp_path / "pool.toml")
    code = (
        "import sys, runpy\n"
        "sys.argv = ['fugu', '--help']\n"
        "try:\n    runpy.run_module('fugu_cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "before = 'mcp' in sys.modules or 'mcp_types' in sys.modules\n"
        "from pathlib import Path\n"
        "from fugu_cli.app import RunOptions, build_session\n"
        "from fugu_cli.llm.scripted import ScriptedLLM\n"
        f"s = build_session(RunOptions(cwd=Path({repo!r}), pool={pool!r},"
        " permission_mode='full-auto'), llm=ScriptedLLM(['ok']))\n"
        "s.run_turn('hello')\n"
        "print(before, 'mcp' in sys.modules, s.mcp_servers())\n"
        "s.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "False False (('notes', 'pending'),)"


def test_a_session_without_servers_imports_no_mcp_code(tmp_path: Path) -> None:
    """No server configured: a turn loads neither fugu's MCP package nor asyncio (about 40 ms of a launch)."""
    import subprocess

    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "alpha", "model": "openai/alpha"}])
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from fugu_cli.app import RunOptions, build_session\n"
        "from fugu_cli.llm.scripted import ScriptedLLM\n"
        f"s = build_session(RunOptions(cwd=Path({str(repo)!r}), pool={str(pool)!r},"
        " permission_mode='full-auto'), llm=ScriptedLLM(['ok']))\n"
        "s.run_turn('hello')\n"
        "s.close()\n"
        "print(sorted(m for m in ('fugu_cli.mcp', 'mcp', 'asyncio') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "[]"


def test_a_stdio_servers_named_files_are_readable_in_the_sandbox(tmp_path: Path) -> None:
    from fugu_cli.mcp.reach import readable

    script = tmp_path / "srv" / "server.py"
    script.parent.mkdir()
    script.write_text("")
    found = readable([sys.executable, str(script), "--port", "3", "not/a/file"])
    assert {Path(sys.executable).resolve().parent, script.parent.resolve()} <= set(found)
    assert tmp_path not in found and Path("not/a") not in found


def test_an_mcp_tool_s_picture_reaches_the_worker_that_sees_it(tmp_path: Path) -> None:
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
    )
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "blind", "model": "openai/blind", "priority": 2},
            {"name": "seer", "model": "openai/seer", "priority": 1, "vision": True},
        ],
    )
    llm = ScriptedLLM(
        {
            "blind": [tool_reply(tc("c1", "mcp__notes__screenshot"))],
            "seer": ["The screen shows one red pixel."],
        }
    )
    session = build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto"), llm=llm)
    try:
        assert (
            session.run_turn("take a screenshot and say what it shows").result
            == "The screen shows one red pixel."
        )
    finally:
        session.close()
    assert [c.worker for c in llm.calls] == ["blind", "seer"]
    seen = llm.calls[-1].messages
    tool = next(m for m in seen if m.role == "tool")
    assert tool.content == "[image: attached below]"
    assert seen[-1].role == "user" and [i.media_type for i in seen[-1].images] == ["image/png"]
    assert (seen[-1].content or "").startswith("Images from the tool results: mcp__notes__screenshot:")
