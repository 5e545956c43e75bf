"""The real REPL in a pty with a repository's `.mcp.json`: the trust question, an MCP call approved once for
good, a resource attached, `/mcp`, a server's prompt as a slash command, and the server gone after exit."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.mcp.test_mcp_session import _servers_running
from tests.ui.test_repl_pty import PROMPT, SLOW, Term

NOTES = str(Path(__file__).with_name("notes_server.py"))


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


def test_the_repl_trusts_calls_attaches_and_prompts(tmp_path: Path, server: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"notes": {"command": sys.executable, "args": [NOTES]}}})
    )
    write_pool(
        repo / ".fugu-pool.toml", [{"name": "alpha", "model": "openai/alpha", "api_base": server.base_url}]
    )
    (repo / ".git" / "info" / "exclude").write_text(".fugu-pool.toml\n")
    server.script(
        "alpha",
        [
            tool_reply(call("mcp__notes__add", a=2, b=3)),
            tool_reply(call("mcp__notes__add", a=5, b=5)),
            "2 + 3 = 5, then 10; and buy milk.",
            "calc.py has no off-by-one error.",
        ],
    )
    child = Term(repo)
    child.expect(r"This folder would run commands of its own: \.mcp\.json servers \(notes\)")
    child.expect(r"\[y/N\]")
    child.send("y\r")
    child.expect("trusted; fugu remembers it")
    child.turn("add 2 and 3, then 5 and 5 @notes:notes://today")
    child.expect("attached notes:notes://today", timeout=SLOW)
    child.expect(r'alpha wants to call mcp__notes__add \{"a": 2, "b": 3\}', timeout=SLOW)
    child.expect(r"\[a\]lways \(mcp__notes__add")
    child.send("a")
    child.expect(r"alpha ▸ mcp__notes__add", timeout=SLOW)
    child.expect("and buy milk.", timeout=SLOW)
    child.finished()
    assert child.text.count("wants to call") == 1  # "always" held for the second call
    first = server.requests_for("alpha")[0].messages[-1]["content"]
    assert '<resource server="notes" uri="notes://today">\nBuy milk and ship the release.' in first
    results = [m["content"] for m in server.requests_for("alpha")[2].messages if m["role"] == "tool"]
    assert results == ["5", "10"]

    child.send("/mcp\r")
    child.expect(r"notes  stdio  running  8 tools  \[\.mcp\.json\]")
    child.expect(PROMPT)
    child.send("/mcp__notes__review calc.py\r")
    child.expect("no off-by-one error", timeout=SLOW)
    child.finished()
    assert server.requests_for("alpha")[-1].messages[-1]["content"] == (
        "Please review calc.py for off-by-one errors."
    )
    assert _servers_running()
    child.quit()
    assert not _servers_running()  # the server stopped with the session
