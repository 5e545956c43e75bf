"""Issue 22, item 9: an MCP server that answers 40 MB, one whose answer is over what fugu reads, and one whose
tool hangs. The real `fugu` binary or a real session, a loopback worker, and `notes_server.py` over stdio
through the sandbox: the model reads a bounded result, the server and the session go on."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.mcp import framing
from tests.conductor.kit import tc
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

NOTES = str(Path(__file__).parents[1] / "mcp" / "notes_server.py")


def _run(
    tmp_path: Path, loopback: LoopbackServer, server: Mapping[str, object], *calls: dict[str, Any]
) -> list[str]:
    """`fugu -p` in a trusted repository whose .mcp.json has the notes server; the tool results it sent."""
    repo = make_repo(tmp_path / "repo")
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"notes": server}}))
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    loopback.script("solo", [*(tool_reply(c) for c in calls), "done"])
    run = fugu(
        "-p", "use the notes", "--pool", str(pool), "--permission-mode", "full-auto", "--trust-project",
        cwd=repo, timeout=300,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert "stopped working" not in run.stderr, run.stderr
    last = loopback.requests_for("solo")[-1]
    return [str(m["content"]) for m in last.messages if m["role"] == "tool"]


def test_a_40_mb_answer_is_bounded_for_the_model_and_kept_whole(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    server = {"command": sys.executable, "args": [NOTES]}
    big, added = _run(
        tmp_path, loopback, server, call("mcp__notes__big", megabytes=40), call("mcp__notes__add", a=1, b=2)
    )
    assert added == "3"  # the server answered the next call: it survived the 40 MB
    assert len(big) < 40_000 and big.startswith("line 0 ")
    where = re.search(r"read_file\(path='([^']+)'", big)
    assert where is not None, big
    kept = Path(where.group(1))
    assert kept.parent == Path(os.environ["FUGU_HOME"]) / "tool-output"
    text = kept.read_text()
    assert len(text) >= 40 * 1024 * 1024
    assert big.endswith(text.rsplit("\n", 1)[-1])  # the tail the model read is the answer's own last line


def test_a_hanging_tool_is_cut_off_at_the_servers_timeout_and_the_session_goes_on(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    server = {
        "command": sys.executable,
        "args": [NOTES],
        "timeout": 1500,
    }  # milliseconds, as Claude Code reads it
    hung, added = _run(
        tmp_path, loopback, server, call("mcp__notes__hang", seconds=600), call("mcp__notes__add", a=2, b=3)
    )
    assert "did not answer within 1.5 s" in hung and "the server is still there" in hung, hung
    assert added == "5"


def test_an_answer_over_the_limit_is_dropped_with_a_reason_and_the_server_lives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(framing, "MAX_MESSAGE", 1024 * 1024)  # 1 MB here stands for the real 128 MB
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
    )
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    llm = ScriptedLLM(
        [
            tool_reply(tc("c1", "mcp__notes__big", megabytes=3)),
            tool_reply(tc("c2", "mcp__notes__add", a=4, b=5)),
            "ok",
        ]
    )
    session = build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto"), llm=llm)
    try:
        result = session.run_turn("use the notes")
        assert result.status == "success", result.error
        dropped, added = [m.content for m in llm.calls[-1].messages if m.role == "tool"]
        assert "over the 1 MB fugu reads from an MCP server, and was dropped" in (dropped or ""), dropped
        assert added == "9"
        assert session.mcp_servers() == (("notes", "connected"),)
    finally:
        session.close()
