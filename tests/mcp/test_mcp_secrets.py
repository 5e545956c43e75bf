"""A secret an MCP server is given in its environment, and prints on its stderr, never reaches FUGU_HOME or
the screen: the server's stderr goes through the redactor into its (capped) log file, and the line shown when
it stops is redacted. A real server process (through fugu's sandbox), the real `fugu` binary."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fugu_cli.mcp.stderr import StderrLog
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

TOKEN = "svc-7f3a9c0d2e1b4a6f"
NOTES = str(Path(__file__).with_name("notes_server.py"))


def _home() -> Path:
    return Path(os.environ["FUGU_HOME"])


def _everything_under(folder: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()]


def _config() -> None:
    leaky = 'echo "connecting with token $SERVICE_TOKEN" >&2; echo "auth refused: $SERVICE_TOKEN" >&2; exit 3'
    (_home() / "config.toml").write_text(
        "[mcp_servers.leaky]\n"
        'command = "sh"\n'
        f"args = ['-c', '{leaky}']\n"
        f'env = {{ SERVICE_TOKEN = "{TOKEN}" }}\n\n'
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{NOTES}"]\n'
        f'env = {{ NOTES_API_KEY = "{TOKEN}-notes" }}\n'
    )


def test_a_servers_secret_on_its_stderr_reaches_neither_fugu_home_nor_the_screen(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    _config()
    listing = fugu("mcp", "list", cwd=repo)
    assert listing.code == 1  # the leaky server failed
    assert "auth refused: [leaky SERVICE_TOKEN]" in listing.stdout  # its last words, redacted
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    loopback.script("solo", [tool_reply(call("mcp__notes__crash")), "done"])
    run = fugu("-p", "go", "--pool", str(pool), "--permission-mode", "full-auto", cwd=repo)
    assert run.code == 0, run.stderr
    assert (
        "MCP server leaky could not start" in run.stderr and "MCP server notes stopped working" in run.stderr
    )
    for shown in (listing.stdout, listing.stderr, run.stdout, run.stderr):
        assert TOKEN not in shown
    files = _everything_under(_home())
    logs = [p.name for p, _ in files if p.name.startswith("mcp-")]
    assert "mcp-leaky.log" in logs and "mcp-notes.log" in logs
    leaky_log = (_home() / "logs" / "mcp-leaky.log").read_text()
    assert "connecting with token [leaky SERVICE_TOKEN]" in leaky_log
    written = [p for p, data in files if p != _home() / "config.toml"]  # where the user gave it
    assert written and [p for p, data in files if p in written and TOKEN.encode() in data] == []


def test_a_servers_stderr_log_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "mcp-chatty.log"
    errlog = StderrLog(path, cap_bytes=2_000)
    writer = errlog.writer()
    for i in range(200):
        writer.write(f"line {i:03d} of a chatty server\n".encode())
    writer.close()
    assert errlog.last_line(wait_s=5.0) == "line 199 of a chatty server"
    assert path.stat().st_size <= 2_000 and "line 199" in path.read_text()
    older = path.with_name("mcp-chatty.log.1")
    assert older.stat().st_size <= 2_000 and "line 199" not in older.read_text()
