"""Long sessions through the real CLI against loopback workers: a context-window error gets a compacted retry
(never a failover), a worker too small for the transcript is masked (the route event says why), and
`--continue` resumes the compacted transcript while the store keeps every message."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

OVERFLOW = {
    "fault": 400,
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens. Please reduce the length of the messages.",
    "code": "context_length_exceeded",
}


def _pool(tmp_path: Path, server: LoopbackServer, workers: list[dict[str, Any]]) -> Path:
    rows = [{"model": f"openai/{w['name']}", "api_base": server.base_url, **w} for w in workers]
    return write_pool(tmp_path / "pool.toml", rows)


def _paired(messages: list[dict[str, Any]]) -> bool:
    """Every tool result answers a call made earlier in the same request."""
    calls: set[str] = set()
    for m in messages:
        calls.update(tc["id"] for tc in m.get("tool_calls") or ())
        if m["role"] == "tool" and m["tool_call_id"] not in calls:
            return False
    return True


def test_a_context_window_error_gets_a_compacted_retry_and_continue_resumes_compacted(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "notes.txt").write_text("".join(f"line {i}: the quick brown fox jumps\n" for i in range(400)))
    pool = _pool(
        tmp_path,
        loopback,
        [
            {"name": "solo", "priority": 2, "price_in": 1.0, "price_out": 1.0},
            # named literally: the run's seed of litellm's answers (tests/conftest.py) then holds this model
            {"name": "backup", "model": "openai/backup", "priority": 1, "price_in": 5.0, "price_out": 5.0},
        ],
    )
    loopback.script(
        "solo",
        [
            tool_reply(call("read_file", path="notes.txt")),
            tool_reply(call("read_file", path="test_calc.py")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            OVERFLOW,
            "SUMMARY: read calc.py and test_calc.py; the test fails because add subtracts.",
            "add subtracts instead of adding.",
        ],
    )
    run = fugu(
        "-p", "why does the test fail?", "--pool", str(pool), "-y", "--output-format", "stream-json", cwd=repo
    )
    assert run.code == 0, run.stderr
    events = run.events()
    assert events[-1]["result"] == "add subtracts instead of adding."
    [compact] = [e for e in events if e.get("subtype") == "compact"]
    assert compact["trigger"] == "overflow" and compact["worker"] == "solo"
    assert compact["summarizer"] == "solo"  # the cheapest worker
    assert compact["tokens_after"] < compact["tokens_before"]
    assert not loopback.requests_for("backup"), "a context-window error must not fail over"
    solo = loopback.requests_for("solo")
    failed, summarize, retry = solo[3], solo[4], solo[5]
    assert "tools" not in summarize.body and "the quick brown fox" in json.dumps(summarize.body)
    assert len(json.dumps(retry.messages)) < len(json.dumps(failed.messages))
    assert any("SUMMARY: read calc.py" in (m["content"] or "") for m in retry.messages)
    assert not any("quick brown fox" in (m["content"] or "") for m in retry.messages if m["role"] == "tool")
    assert any("exit 1" in (m["content"] or "") for m in retry.messages)  # the facts the ledger distils
    assert _paired(retry.messages)
    assert retry.messages[1]["content"].startswith("Repository map")  # given before the task
    assert retry.messages[2]["content"] == "why does the test fail?"

    loopback.script("solo", ["Still: add subtracts."])
    again = fugu("-p", "and now?", "--continue", "--pool", str(pool), cwd=repo)
    assert again.code == 0, again.stderr
    resumed = loopback.requests_for("solo")[-1].messages
    assert any("SUMMARY: read calc.py" in (m["content"] or "") for m in resumed)
    assert not any("quick brown fox" in (m["content"] or "") for m in resumed if m["role"] == "tool")
    assert resumed[-1]["content"].startswith("and now?")


def test_a_worker_too_small_for_the_transcript_is_masked_and_the_route_says_why(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "notes.txt").write_text("".join(f"line {i}: the quick brown fox jumps\n" for i in range(400)))
    pool = _pool(
        tmp_path,
        loopback,
        [
            {"name": "small", "priority": 2, "context_limit": 4096},
            {"name": "big", "priority": 1, "context_limit": 32768},
        ],
    )
    loopback.script("small", [tool_reply(call("read_file", path="notes.txt"))])
    loopback.script("big", ["The notes are about a fox."])
    run = fugu("-p", "summarise notes.txt", "--pool", str(pool), "--output-format", "stream-json", cwd=repo)
    assert run.code == 0, run.stderr
    routes = [e for e in run.events() if e.get("subtype") == "route"]
    assert [r["worker"] for r in routes] == ["small", "big"]
    assert "masked" not in routes[0].get("reason", "")
    assert "masked" in routes[1]["reason"] and "small holds 4,096 tokens" in routes[1]["reason"]
    assert routes[1]["scores"]["small"] == 0.0
    assert len(loopback.requests_for("small")) == 1


@pytest.mark.cold_home  # a first run: the window comes from litellm's table itself, and is kept for the next
def test_fugu_pool_shows_each_workers_window_reserve_and_tokenizer(tmp_path: Path) -> None:
    kept = Path(os.environ["FUGU_HOME"]) / "cache" / "models.json"
    assert not kept.exists()
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "local",
                "model": "openai/local-8k",
                "api_base": "http://127.0.0.1:9",
                "context_limit": 8192,
            },
            {"name": "claude", "model": "anthropic/claude-sonnet-4-5-20250929", "api_key_env": "NO_SUCH_KEY"},
        ],
    )
    run = fugu("pool", "--pool", str(pool), "--json", cwd=tmp_path)
    rows = {w["name"]: w for w in json.loads(run.stdout)["workers"]}
    assert (rows["local"]["context_window"], rows["local"]["output_reserve"]) == (8192, 2048)
    assert rows["local"]["window_source"] == "pool"
    assert (rows["claude"]["context_window"], rows["claude"]["window_source"]) == (200_000, "litellm")
    assert rows["claude"]["tokenizer"].startswith("tiktoken:")
    learnt = json.loads(kept.read_text())["models"]["anthropic/claude-sonnet-4-5-20250929"]
    assert learnt["max_input_tokens"] == 200_000 and learnt["tokenizer"] == rows["claude"]["tokenizer"]
    text = fugu("pool", "--pool", str(pool), cwd=tmp_path).stdout
    assert "8k ctx, 2k out (pool)" in text and "200k ctx, 8k out (litellm)" in text
