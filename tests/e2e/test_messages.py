"""The exact words a newcomer meets when something is off: each says what happened and what to do, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import fugu, make_repo, write_pool
from tests.loopback import LoopbackServer, RawServer


def test_no_usable_worker_names_every_way_to_get_one(tmp_path: Path) -> None:
    run = fugu("-p", "hi", cwd=tmp_path, env={"OLLAMA_HOST": "http://127.0.0.1:9"})
    assert run.code == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("fugu: no worker is configured: set ANTHROPIC_API_KEY, OPENAI_API_KEY")
    assert "start a local Ollama server (found at OLLAMA_HOST, default http://127.0.0.1:11434)" in line


def test_every_worker_failing_is_said_once_with_each_providers_reason_first(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")
    loopback.script("one", [{"fault": 503}])
    loopback.script("two", [{"fault": 500}])
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "one", "model": "openai/one", "api_base": loopback.base_url, "priority": 2},
            {"name": "two", "model": "openai/two", "api_base": loopback.base_url, "priority": 1},
        ],
    )
    run = fugu("-p", "x", "--pool", str(pool), cwd=repo)
    assert run.code == 1
    failed = [line for line in run.stderr.splitlines() if "every worker failed" in line]
    assert len(failed) == 1
    assert "worker one (openai/one): server error 503: loopback fault 503" in failed[0]
    assert "Exception" not in run.stderr and "litellm." not in run.stderr


def test_a_moved_endpoint_is_tried_once_and_says_the_api_base_to_set(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """A worker whose endpoint redirects (an http:// api_base where the provider serves https://) fails
    at once, not after every retry, with the address to set; the turn goes on with the next worker."""
    repo = make_repo(tmp_path / "repo")
    moved = "https://api.example.com/v1/chat/completions"
    loopback.script("one", [{"fault": 301, "location": moved}])
    loopback.script("two", [{"content": "done"}])
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "one", "model": "openai/one", "api_base": loopback.base_url, "priority": 2},
            {"name": "two", "model": "openai/two", "api_base": loopback.base_url, "priority": 1},
        ],
    )
    run = fugu("-p", "x", "--pool", str(pool), "--router", "prior", cwd=repo)
    assert run.code == 0, run.stderr
    assert [r.model for r in loopback.requests if r.path.endswith("/chat/completions")] == ["one", "two"]
    said = f"worker one (openai/one): HTTP 301: the endpoint moved to {moved}; fugu does not follow redirects"
    assert f'{said}: set the worker\'s api_base to "https://api.example.com/v1"' in run.stderr


def test_a_web_page_for_a_reply_is_tried_once_and_says_to_check_the_api_base(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """An api_base that leads to a web page (a captive portal, a server's home page): one attempt, the page
    quoted, and the turn goes on with the next worker."""
    repo = make_repo(tmp_path / "repo")
    page = b"<html><body>Log in to the Wi-Fi</body></html>"
    portal = RawServer(
        lambda _: (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: %d\r\n\r\n%s" % (len(page), page)
        )
    )
    loopback.script("two", [{"content": "done"}])
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "one", "model": "openai/one", "api_base": portal.base_url, "priority": 2},
            {"name": "two", "model": "openai/two", "api_base": loopback.base_url, "priority": 1},
        ],
    )
    try:
        run = fugu("-p", "x", "--pool", str(pool), "--router", "prior", cwd=repo)
    finally:
        portal.close()
    assert run.code == 0, run.stderr
    assert [r for r in portal.requests if r.startswith(b"POST")] == portal.requests[
        -1:
    ]  # once (after a probe)
    assert [r.model for r in loopback.requests if r.method == "POST"] == ["two"]
    said = (
        "worker one (openai/one): a text/html reply, not a chat completion ('<html><body>Log in to the Wi-Fi"
    )
    assert said in run.stderr and "check that its api_base is an OpenAI-compatible endpoint" in run.stderr


def test_a_wait_before_another_attempt_is_said_before_it(tmp_path: Path, loopback: LoopbackServer) -> None:
    """A rate-limited worker asks for a wait: the user reads why nothing happens, and for how long, before
    the wait (it was silent for as long as 30 s)."""
    repo = make_repo(tmp_path / "repo")
    loopback.script("one", [{"fault": 429, "retry_after": 0.2}, {"content": "done"}])
    one = {"name": "one", "model": "openai/one", "api_base": loopback.base_url}
    pool = write_pool(tmp_path / "pool.toml", [one])
    run = fugu("-p", "x", "--pool", str(pool), cwd=repo)
    assert run.code == 0, run.stderr
    said = "· worker one (openai/one): rate limited (429); trying again in 0.2 s (attempt 2 of 4)"
    lines = run.stderr.splitlines()
    assert said in lines and lines.index(said) < next(i for i, x in enumerate(lines) if x.startswith("↳ one"))


def test_a_task_no_window_holds_is_refused_before_any_request_and_says_what_to_do(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    """A log piped in that no worker's window holds: nothing is sent (no spend), exit 1, and the error
    says the sizes and how to ask about such a text."""
    repo = make_repo(tmp_path / "repo")
    one = {"name": "one", "model": "openai/one", "api_base": loopback.base_url, "context_limit": 8000}
    pool = write_pool(tmp_path / "pool.toml", [one])
    log = "".join(f"10:00:{i % 60:02d} INFO worker {i} did a thing\n" for i in range(4000))
    run = fugu("-p", "summarize this log", "--pool", str(pool), cwd=repo, stdin=log)
    assert run.code == 1
    assert not [r for r in loopback.requests if r.method == "POST"]
    said = "no worker can take this step (no window can hold the transcript, even compacted): one holds 8,000"
    assert said in run.stderr
    assert "the task itself is too long for any worker: save its text in a file in the" in run.stderr


def test_a_config_typo_gets_a_did_you_mean(tmp_path: Path) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\ntimout_s = 5\n")
    run = fugu("-p", "hi", cwd=tmp_path)
    assert run.code == 2
    assert run.stderr.strip().endswith(
        "unknown setting 'llm.timout_s'; did you mean 'timeout_s'? (see README.md, Configuration)"
    )


def test_a_pool_folder_and_a_worker_typo_say_what_to_fix(tmp_path: Path) -> None:
    run = fugu("pool", "--pool", str(tmp_path), cwd=tmp_path)
    assert run.code == 2
    assert f"--pool {tmp_path} is a folder: give the pool's TOML file" in run.stderr
    bad = tmp_path / "pool.toml"
    bad.write_text('[[workers]]\nname = "a"\nmodle = "openai/a"\n')
    run = fugu("pool", "--pool", str(bad), cwd=tmp_path)
    assert run.code == 2 and "unknown setting 'modle'; did you mean 'model'?" in run.stderr


def test_pool_columns_line_up_for_long_names(tmp_path: Path, loopback: LoopbackServer) -> None:
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "a-very-long-worker-name-indeed",
                "model": "openai/x",
                "api_base": loopback.base_url,
                "price_in": 1.0,
                "price_out": 2.0,
            },
            {
                "name": "b",
                "model": "openai/a-much-longer-model-identifier-here",
                "api_base": loopback.base_url,
                "price_in": 1.0,
                "price_out": 2.0,
            },
        ],
    )
    run = fugu("pool", "--pool", str(pool), cwd=tmp_path)
    assert run.code == 0, run.stderr
    rows = run.stdout.splitlines()[1:]
    assert len(rows) == 2
    assert rows[0].index("openai/x") == rows[1].index("openai/a-much")
    assert rows[0].index("$1/$2") == rows[1].index("$1/$2")


def test_resume_takes_a_unique_prefix(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    loopback.script("solo", ["one", "two"])
    first = json.loads(fugu("-p", "a", "--pool", str(pool), "--output-format", "json", cwd=repo).stdout)
    sid = first["session_id"]
    again = fugu("-p", "b", "--resume", sid[:-3], "--pool", str(pool), "--output-format", "json", cwd=repo)
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["session_id"] == sid
    missing = fugu("-p", "b", "--resume", "nope", "--pool", str(pool), cwd=repo)
    assert missing.code == 2
    assert "cannot resume: no session nope (list them with: fugu sessions)" in missing.stderr
    fresh = make_repo(tmp_path / "fresh")
    nothing = fugu("-p", "b", "-c", "--pool", str(pool), cwd=fresh)
    assert nothing.code == 2
    assert f"cannot resume: no earlier session in {fresh} (list them with: fugu sessions)" in nothing.stderr
    wrong = fugu("-p", "b", "--router", "nonsense", "--pool", str(pool), cwd=repo)
    assert wrong.code == 2 and "give 'prior', 'default' or a directory made by fugu router" in wrong.stderr


def test_bytes_that_are_not_utf8_in_the_task_are_shown_not_fatal(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    loopback.script("solo", ["seen", "seen too"])
    proc = subprocess.run(
        [sys.executable, "-m", "fugu_cli", "-p", os.fsdecode(b"fix \xff\xfe here"), "--pool", str(pool)],
        cwd=repo,
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    piped = subprocess.run(
        [sys.executable, "-m", "fugu_cli", "-p", "--pool", str(pool)],
        cwd=repo,
        input=b"from stdin \xff\xfe",
        capture_output=True,
    )
    assert piped.returncode == 0, piped.stderr.decode()
    sent = [r.messages[-1]["content"] for r in loopback.requests_for("solo")]
    assert sent == ["fix \ufffd\ufffd here", "from stdin \ufffd\ufffd"]


def test_a_pool_the_shipped_router_does_not_know_is_told_the_way_to_a_learned_one(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "mine", "model": "openai/mine", "api_base": loopback.base_url},
            {"name": "other", "model": "openai/other", "api_base": loopback.base_url},
        ],
    )
    loopback.script("mine", ["ok"])
    loopback.script("other", ["ok"])
    run = fugu("-p", "hi", "--pool", str(pool), cwd=repo)
    assert run.code == 0, run.stderr
    (hint,) = [line for line in run.stderr.splitlines() if line.startswith("· ")]
    assert hint.startswith("· the shipped router knows 0 of your workers (none); it needs two")
    assert "`fugu eval SUITE`, then `fugu router train --store`" in hint
    again = fugu("-p", "hi", "--pool", str(pool), cwd=repo)  # said once per FUGU_HOME, not on every run
    assert again.code == 0, again.stderr
    assert "shipped router knows" not in again.stderr
    info = fugu("router", "info", "--pool", str(pool), cwd=repo)
    assert info.code == 0 and info.stdout.startswith("a session here uses prior: the shipped router knows 0")
    shipped = fugu("router", "info", "default", cwd=repo)
    assert (
        shipped.code == 0 and "router checkpoint" in shipped.stdout and "does not exist" not in shipped.stderr
    )


def test_doctor_says_what_was_found_and_whether_fugu_can_run(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    bare = fugu("doctor", cwd=tmp_path, env={"OLLAMA_HOST": "http://127.0.0.1:9"})
    assert bare.code == 2
    assert "keys set       none" in bare.stdout and "! no usable worker" in bare.stdout
    assert bare.stdout.rstrip().endswith("not ready: fix the lines marked !")
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "mine", "model": "openai/mine", "api_base": loopback.base_url},
            {"name": "gone", "model": "openai/gone", "api_base": "http://127.0.0.1:9/v1"},
        ],
    )
    ready = fugu("doctor", "--pool", str(pool), cwd=tmp_path)
    assert ready.code == 0, ready.stdout
    assert "  ok mine  openai/mine" in ready.stdout and "  -- gone  openai/gone" in ready.stdout
    assert "prior: the shipped router knows 0 of your workers" in ready.stdout
    assert "sandbox        bubblewrap" in ready.stdout
    assert ready.stdout.rstrip().endswith("ready: fugu can run here")


def test_doctor_names_the_extensions_a_session_here_gets_and_starts_none(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    evil = {"evil": {"command": "touch", "args": ["ran"]}}
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": evil}))
    (repo / ".fugu" / "commands").mkdir(parents=True)
    (repo / ".fugu" / "commands" / "fix-issue.md").write_text("Fix issue #$ARGUMENTS.\n")
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "Bash"\ncommand = "touch hook-ran"\n\n'
        '[mcp_servers.mine]\ncommand = "touch"\nargs = ["mine-ran"]\n'
    )
    run = fugu("doctor", cwd=repo, env={"OLLAMA_HOST": "http://127.0.0.1:9"})
    assert "  MCP servers    mine (user config) (fugu mcp list starts them)" in run.stdout
    assert "  hooks          PreToolUse ×1" in run.stdout
    assert "  commands       /fix-issue (project)" in run.stdout
    assert "did not load the MCP servers of .mcp.json (evil)" in run.stdout
    assert not any((repo / f).exists() for f in ("ran", "hook-ran", "mine-ran"))
