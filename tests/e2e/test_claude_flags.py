"""Claude Code's flags on fugu's command line: honoured (what the workers are told and offered), honoured
partly (said once on stderr), or refused in one line with exit 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import fugu, make_repo
from tests.loopback import LoopbackServer
from tests.sdk_kit import pool_file


def _tools_offered(server: LoopbackServer, model: str) -> list[str]:
    body = server.requests_for(model)[0].body
    return [t["function"]["name"] for t in body.get("tools") or []]


def test_prompt_and_tool_flags_reach_the_workers(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text("Use tabs.\n")
    prompt = tmp_path / "prompt.md"
    prompt.write_text("You review code and never edit it.")
    loopback.script("solo", ["ok"])
    pool = pool_file(tmp_path, loopback, "solo")
    run = fugu(
        "-p", "look", "--pool", str(pool), "--output-format", "json",
        "--system-prompt-file", str(prompt), "--append-system-prompt", "Answer in one word.",
        "--tools", "Read,Grep,Bash,Edit", "--disallowedTools", "Bash", "--permission-mode", "plan",
        cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    system = loopback.requests_for("solo")[0].messages[0]["content"]
    assert system.startswith("You review code and never edit it.") and system.endswith("Answer in one word.")
    assert "Use tabs." in system  # the project's instructions still come along
    assert _tools_offered(loopback, "solo") == ["read_file", "grep", "edit_file"]
    assert "will be refused" not in run.stderr  # plan mode was asked for


def test_partly_honoured_flags_are_said_once(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", ["ok"])
    run = fugu(
        "-p", "x", "--pool", str(pool_file(tmp_path, loopback, "solo")), "--fallback-model", "sonnet",
        "--effort", "high", "--allowedTools", "Task,Bash(git status:*)", "--output-format", "stream-json",
        "--include-partial-messages", "--strict-mcp-config",
        cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    lines = run.stderr.splitlines()
    for flag in ("--fallback-model", "--effort", "--allowedTools Task", "--include-partial-messages"):
        assert sum(line.startswith(f"fugu: {flag}") for line in lines) == 1, (flag, lines)
    assert "--strict-mcp-config" not in run.stderr and "Traceback" not in run.stderr
    deltas = [e for e in run.events() if e["type"] == "stream_event"]
    assert "".join(e["event"]["delta"]["text"] for e in deltas) == "ok"


def test_flags_fugu_cannot_honour_exit_2_in_one_line(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = str(pool_file(tmp_path, loopback, "solo"))
    cases = {
        ("--permission-mode", "auto"): "fugu has no model that judges each tool call",
        ("--disallowedTools", "Read(./.env)"): "cannot refuse reads of particular paths",
        ("--add-dir", "../other"): "--add-dir ../other: no such folder",
        ("--json-schema", json.dumps({"type": "object"})): "cannot force a structured answer",
        ("--model", "gpt-9"): "no such usable worker or model",
        ("--system-prompt-file", "missing.md"): "--system-prompt-file missing.md",
        ("--input-format", "stream-json"): "needs --output-format stream-json",
    }
    for args, says in cases.items():
        run = fugu("-p", "x", "--pool", pool, *args, cwd=repo)
        assert run.code == 2, (args, run.stderr)
        assert run.stderr.count("\n") == 1 and says in run.stderr, (args, run.stderr)
    assert loopback.requests_for("solo") == []
