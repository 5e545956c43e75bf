"""`/compact`, `/map` and `/cost` in the real REPL (pexpect) against loopback workers."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import call, tool_reply
from tests.loopback import LoopbackServer
from tests.ui.test_repl_pty import PROMPT, SLOW, Term, repo, server

__all__ = ["repo", "server"]


def test_compact_shrinks_the_next_request_and_map_and_cost_show_the_context(
    repo: Path, server: LoopbackServer
) -> None:
    (repo / "notes.txt").write_text("".join(f"line {i}: the quick brown fox jumps\n" for i in range(300)))
    server.script(
        "alpha",
        [tool_reply(call("read_file", path="notes.txt")), "The notes are about a fox.", "Yes, a fox."],
    )
    server.script("beta", ["SUMMARY: the user asked about notes.txt; it is about a fox."])
    child = Term(repo)
    child.turn("what is in notes.txt?")
    child.expect("The notes are about a fox.", timeout=SLOW)
    child.finished()
    before = server.requests_for("alpha")[-1]

    child.send("/map\r")
    child.expect("Repository map")
    child.expect(r"calc\.py:")
    child.expect(r"def add\(a, b\):")
    child.expect(PROMPT)

    child.send("/compact the fox\r")
    child.expect(r"compacted: [\d,]+ → [\d,]+ tokens for alpha", timeout=SLOW)
    child.expect(r"summary by\s+beta")  # the cheapest worker writes it (the line may wrap there)
    child.expect(PROMPT)
    summarize = server.requests_for("beta")[-1]
    assert "Focus the summary on: the fox" in json.dumps(summarize.body)

    child.send("/cost\r")
    child.expect(r"context used: alpha [\d,]+/28,672 \(\d+%\)")
    child.expect(PROMPT)

    child.send("is it a fox?\r")
    child.expect("Yes, a fox.", timeout=SLOW)
    child.finished()
    after = server.requests_for("alpha")[-1]
    assert len(json.dumps(after.messages)) < len(json.dumps(before.messages)) / 2
    assert any("SUMMARY: the user asked" in (m["content"] or "") for m in after.messages)
    assert not any("quick brown fox" in (m["content"] or "") for m in after.messages if m["role"] == "tool")
    child.quit()
