"""fugu as an MCP client, end to end: the real `fugu` binary, loopback workers, and real MCP servers: the
third-party `mcp-server-time` from PyPI and `notes_server.py` (written here with the SDK's MCPServer), over
stdio (through fugu's sandbox) and over streamable HTTP."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

NOTES = str(Path(__file__).with_name("notes_server.py"))
TIME = str(Path(sys.executable).with_name("mcp-server-time"))


def _pool(tmp_path: Path, server: LoopbackServer, *names: str) -> Path:
    workers = [
        {"name": n, "model": f"openai/{n}", "api_base": server.base_url, "priority": len(names) - i}
        for i, n in enumerate(names)
    ]
    return write_pool(tmp_path / "pool.toml", workers)


def _home() -> Path:
    return Path(os.environ["FUGU_HOME"])


def _rows(sql: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(_home() / "fugu.db")
    con.row_factory = sqlite3.Row
    try:
        return list(con.execute(sql))
    finally:
        con.close()


def _tool_messages(server: LoopbackServer, model: str) -> list[str]:
    last = server.requests_for(model)[-1]
    return [str(m["content"]) for m in last.messages if m["role"] == "tool"]


def _offered(server: LoopbackServer, model: str) -> dict[str, Any]:
    body = server.requests_for(model)[0].body
    return {t["function"]["name"]: t["function"] for t in body.get("tools") or []}


def _mcp_json(repo: Path, servers: dict[str, Any]) -> None:
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": servers}, indent=2))


def test_stdio_servers_tools_reach_the_workers_and_the_ledger_names_who_called(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    _mcp_json(
        repo,
        {
            "time": {"command": TIME, "args": ["--local-timezone", "UTC"]},
            "notes": {
                "command": sys.executable,
                "args": [NOTES],
                "env": {"NOTES_MODE": "${NOTES_MODE:-test}"},
            },
        },
    )
    loopback.script(
        "alpha",
        [tool_reply(call("mcp__time__get_current_time", timezone="Asia/Tokyo")), *[{"fault": 500}] * 4],
    )
    loopback.script(
        "beta",
        [tool_reply(call("mcp__notes__add", a=2, b=40), call("mcp__notes__surroundings")), "Tokyo; 42."],
    )
    (_home() / "config.toml").write_text("[llm]\nbackoff_base_s = 0.01\n")
    pool = str(_pool(tmp_path, loopback, "alpha", "beta"))
    run = fugu(
        "-p", "what time is it in Tokyo, and what is 2 + 40?", "--pool", pool,
        "--permission-mode", "full-auto", "--trust-project", "--output-format", "stream-json",
        cwd=repo, env={"PLANTED_SECRET_TOKEN": "sk-planted-0123456789abcdef"},
    )  # fmt: skip
    assert run.code == 0, run.stderr
    offered = _offered(loopback, "alpha")
    assert {"mcp__time__get_current_time", "mcp__time__convert_time", "mcp__notes__add"} <= set(offered)
    assert "timezone" in offered["mcp__time__get_current_time"]["parameters"]["properties"]
    assert offered["mcp__notes__add"]["parameters"]["required"] == ["a", "b"]

    # the results reached the model: beta's last request carries both servers' answers
    results = _tool_messages(loopback, "beta")
    assert any('"timezone": "Asia/Tokyo"' in r for r in results), results
    assert "42" in results
    seen = json.loads(next(r for r in results if r.startswith("{") and '"cwd"' in r))
    assert seen["cwd"] == str(repo) and seen["writable"] is True  # the repository, writable, as commands get
    assert "NOTES_MODE" in seen["env"] and "PLANTED_SECRET_TOKEN" not in seen["env"]  # its env, not fugu's
    assert not any(k.startswith("FUGU_") for k in seen["env"])

    calls = _rows("SELECT agent, tool, arguments, is_error, denied FROM tool_calls ORDER BY rowid")
    assert [(c["agent"], c["tool"], c["is_error"]) for c in calls] == [
        ("alpha", "mcp__time__get_current_time", 0),
        ("beta", "mcp__notes__add", 0),
        ("beta", "mcp__notes__surroundings", 0),
    ]
    init = run.events()[0]
    assert init["subtype"] == "init"
    assert init["mcp_servers"] == [
        {"name": "time", "status": "connected"},
        {"name": "notes", "status": "connected"},
    ]
    assert "mcp__notes__add" in init["tools"]


def test_a_server_over_streamable_http_with_its_prompt_and_resource(
    tmp_path: Path, loopback: LoopbackServer, notes_http: str
) -> None:
    repo = make_repo(tmp_path / "repo")
    bearer = "Bearer web-token-0123456789abcdef"
    (_home() / "config.toml").write_text(
        f'[mcp_servers.web]\nurl = "{notes_http}"\nheaders = {{ Authorization = "{bearer}" }}\n'
    )
    pool = str(_pool(tmp_path, loopback, "solo"))
    loopback.script(
        "solo", [tool_reply(call("mcp__web__lookup", key="release"), call("mcp__web__whoami")), "Friday."]
    )
    task = "when is the release? @web:notes://today"
    run = fugu("-p", task, "--pool", pool, "--allowedTools", "mcp__web", cwd=repo)
    assert run.code == 0, run.stderr
    first = loopback.requests_for("solo")[0].messages[-1]["content"]
    assert "Buy milk and ship the release." in first  # the resource was attached
    lookup, whoami = _tool_messages(loopback, "solo")
    assert lookup == "the release is on Friday"  # allowed by the server's prefix
    # the configured header reached the server, and its token never reaches the model
    assert whoami.startswith(f"sha256 {hashlib.sha256(bearer.encode()).hexdigest()[:12]}: ")
    assert "web-token-0123456789abcdef" not in whoami and "[web header Authorization]" in whoami

    loopback.script("solo", ["Reviewed."])
    run = fugu("-p", "/mcp__web__review calc.py", "--pool", pool, cwd=repo)
    assert run.code == 0, run.stderr
    assert loopback.requests_for("solo")[-1].messages[-1]["content"] == (
        "Please review calc.py for off-by-one errors."
    )


def test_read_only_mode_runs_only_read_only_tools_and_deny_rules_hold(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (_home() / "config.toml").write_text(
        f'[permissions]\ndeny = ["mcp__time"]\n\n[mcp_servers.notes]\ncommand = "{sys.executable}"\n'
        f'args = ["{NOTES}"]\n\n[mcp_servers.time]\ncommand = "{TIME}"\n'
    )
    loopback.script(
        "solo",
        [
            tool_reply(
                call("mcp__notes__add", a=1, b=1),
                call("mcp__notes__lookup", key="release"),
                call("mcp__time__get_current_time", timezone="UTC"),
            ),
            "done",
        ],
    )
    run = fugu(
        "-p", "look around", "--pool", str(_pool(tmp_path, loopback, "solo")), "--permission-mode", "plan",
        "--output-format", "json", cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    add, lookup, clock = _tool_messages(loopback, "solo")
    assert add.startswith("Permission denied: mcp__notes__add")
    assert lookup == "the release is on Friday"
    assert clock.startswith("Permission denied") and "did not allow mcp__time__get_current_time" in clock
    denied = [(r["tool"], r["denied"]) for r in _rows("SELECT tool, denied FROM tool_calls ORDER BY rowid")]
    assert denied == [("mcp__notes__add", 1), ("mcp__notes__lookup", 0), ("mcp__time__get_current_time", 1)]
    result = json.loads(run.stdout)
    assert {d["tool_name"] for d in result["permission_denials"]} == {
        "mcp__notes__add",
        "mcp__time__get_current_time",
    }


def test_a_server_that_fails_to_start_or_dies_is_reported_and_the_session_goes_on(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (_home() / "config.toml").write_text(
        '[mcp_servers.broken]\ncommand = "/nonexistent/mcp-server"\n\n'
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
    )
    loopback.script(
        "solo",
        [
            tool_reply(call("mcp__notes__crash")),
            tool_reply(call("mcp__notes__add", a=1, b=2)),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "The notes server is gone; the test still fails.",
        ],
    )
    pool = str(_pool(tmp_path, loopback, "solo"))
    run = fugu("-p", "go", "--pool", pool, "--permission-mode", "full-auto", cwd=repo)
    assert run.code == 0, run.stderr
    assert "MCP server broken could not start" in run.stderr and "/nonexistent/mcp-server" in run.stderr
    assert "MCP server notes stopped working" in run.stderr
    crash, after, shell = _tool_messages(loopback, "solo")
    assert crash.startswith("Error:") and after.startswith(("Error:", "Unknown tool"))
    assert "add(2, 3) should be 5" in shell  # the rest of the session worked
    second = {t["function"]["name"] for t in loopback.requests_for("solo")[2].body["tools"]}
    assert not any(n.startswith("mcp__") for n in second)  # the dead server's tools are gone


def test_an_untrusted_repository_starts_no_server_and_runs_no_hook(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    _mcp_json(repo, {"evil": {"command": "sh", "args": ["-c", "touch mcp-ran"]}})
    (repo / ".claude").mkdir()
    hook = {"hooks": [{"type": "command", "command": "touch claude-hook-ran"}]}
    (repo / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"PreToolUse": [hook]}}))
    (repo / ".fugu").mkdir()
    (repo / ".fugu" / "config.toml").write_text(
        '[mcp_servers.evil2]\ncommand = "sh"\nargs = ["-c", "touch config-mcp-ran"]\n\n'
        '[[hooks.PostToolUse]]\ncommand = "touch config-hook-ran"\n'
    )
    loopback.script("solo", [tool_reply(call("shell", command="true")), "done"])
    pool = str(_pool(tmp_path, loopback, "solo"))
    run = fugu("-p", "go", "--pool", pool, "--permission-mode", "full-auto", cwd=repo)
    assert run.code == 0, run.stderr
    assert not any(
        (repo / m).exists() for m in ("mcp-ran", "claude-hook-ran", "config-mcp-ran", "config-hook-ran")
    )
    assert "ignored: mcp_servers, hooks" in run.stderr
    assert (
        "did not load the MCP servers of .mcp.json (evil) nor the hooks of .claude/settings.json"
        in run.stderr
    )
    assert not any(n.startswith("mcp__") for n in _offered(loopback, "solo"))
    assert _rows("SELECT COUNT(*) AS n FROM hook_runs")[0]["n"] == 0

    listing = fugu("mcp", "list", cwd=repo)
    assert listing.code == 0 and "no MCP server will start here: this folder is not trusted" in listing.stdout
    assert "not trusted" in listing.stderr and not (repo / "mcp-ran").exists()


def test_mcp_list_shows_sources_status_tools_and_prompts(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    _mcp_json(repo, {"time": {"command": TIME}, "gone": {"command": "/nonexistent/x"}})
    (_home() / "config.toml").write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
    )
    run = fugu("mcp", "list", "--json", "--trust-project", cwd=repo)
    assert run.code == 1, run.stderr  # one server failed
    rows = {r["name"]: r for r in json.loads(run.stdout)["servers"]}
    assert rows["time"]["source"] == ".mcp.json" and rows["time"]["status"] == "ok"
    assert set(rows["time"]["tools"]) == {"get_current_time", "convert_time"}
    assert rows["time"]["read_only_tools"] == rows["time"]["tools"]
    assert rows["notes"]["source"] == "user config" and rows["notes"]["prompts"] == ["review"]
    assert rows["notes"]["resources"] == 1 and "lookup" in rows["notes"]["read_only_tools"]
    assert rows["gone"]["status"] == "failed" and "/nonexistent/x" in rows["gone"]["error"]
    text = fugu("mcp", "list", "--trust-project", cwd=repo)
    assert "/mcp__notes__review" in text.stdout and "lookup (read-only)" in text.stdout


def test_the_sdk_mcp_config_flag_adds_servers(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("mcp__clock__get_current_time", timezone="UTC")), "noon"])
    config = json.dumps({"mcpServers": {"clock": {"command": TIME}}})
    run = fugu(
        "-p", "time?", "--pool", str(_pool(tmp_path, loopback, "solo")), "--mcp-config", config,
        "--strict-mcp-config", cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert '"timezone": "UTC"' in _tool_messages(loopback, "solo")[0]


@pytest.fixture
def notes_http(tmp_path: Path) -> Iterator[str]:
    """notes_server.py over streamable HTTP on a free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path / "notes-http.log").open("wb")
    proc = subprocess.Popen([sys.executable, NOTES, "--http", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the HTTP server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
