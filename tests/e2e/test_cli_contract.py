"""The non-interactive contract (DESIGN §7), through the real CLI against loopback servers."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from tests.helpers import BUGGY, call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer


def _pool(tmp_path: Path, server: LoopbackServer, *names: str) -> Path:
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "api_base": server.base_url,
            "priority": len(names) - i,
            "price_in": 1.0,
            "price_out": 1.0,
        }
        for i, n in enumerate(names)
    ]
    return write_pool(tmp_path / "pool.toml", workers)


def test_turn_limit_exits_53(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [tool_reply(call("glob", pattern="*.py"))] * 5)
    run = fugu(
        "-p",
        "loop forever",
        "--pool",
        str(_pool(tmp_path, loopback, "solo")),
        "--max-turns",
        "2",
        "--output-format",
        "json",
        cwd=repo,
    )
    assert run.code == 53, run.stderr
    result = json.loads(run.stdout)
    assert result["subtype"] == "error_max_turns" and result["is_error"] is True
    assert result["num_turns"] == 2
    assert "--max-turns" in result["result"]


def test_no_usable_worker_exits_2_with_one_helpful_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    run = fugu("-p", "hello", cwd=repo)
    assert run.code == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "OPENAI_API_KEY" in lines[0] and "--pool" in lines[0]
    keyed = write_pool(
        tmp_path / "pool.toml", [{"name": "k", "model": "openai/gpt-5", "api_key_env": "MY_KEY"}]
    )
    run = fugu("-p", "hello", "--pool", str(keyed), cwd=repo)
    assert run.code == 2 and "MY_KEY is not set" in run.stderr


def test_bad_flag_and_bad_pool_file_exit_2(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    assert fugu("-p", "x", "--max-turns", "zero", cwd=repo).code == 2
    bad = tmp_path / "bad.toml"
    bad.write_text("[[workers]]\nname = 'x'\n")
    run = fugu("-p", "x", "--pool", str(bad), cwd=repo)
    assert run.code == 2 and "model" in run.stderr


def test_malformed_tool_call_is_answered_and_survived(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script(
        "solo",
        [
            {"tool_calls": [{"name": "read_file", "arguments": "{not json"}]},
            {"tool_calls": [{"name": "teleport", "arguments": {"to": "mars"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": 42}}]},
            "I could not read it.",
        ],
    )
    run = fugu(
        "-p",
        "read calc",
        "--pool",
        str(_pool(tmp_path, loopback, "solo")),
        "--output-format",
        "stream-json",
        cwd=repo,
    )
    assert run.code == 0, run.stderr
    results = [e["message"]["content"][0] for e in run.events() if e["type"] == "user"]
    assert len(results) == 3 and all(r["is_error"] for r in results)
    assert "JSON" in results[0]["content"] and "teleport" in results[1]["content"]
    # the model saw each error as a tool result with the same call id
    follow_up = loopback.requests_for("solo")[1].messages
    assert follow_up[-1]["role"] == "tool" and "JSON" in follow_up[-1]["content"]


def test_path_outside_repo_and_no_terminal_refusals(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "secret.txt").write_text("top secret")
    loopback.script(
        "solo",
        [
            tool_reply(call("read_file", path="../secret.txt")),
            tool_reply(call("write_file", path="calc.py", content="pwned\n")),
            tool_reply(call("shell", command="rm -f calc.py")),
            "gave up",
        ],
    )
    run = fugu(
        "-p", "go", "--pool", str(_pool(tmp_path, loopback, "solo")), "--output-format", "json", cwd=repo
    )
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    assert len(result["permission_denials"]) == 2
    assert (repo / "calc.py").read_text() == BUGGY
    second = loopback.requests_for("solo")[1].messages
    assert "top secret" not in json.dumps(second) and "outside" in second[-1]["content"]


def test_hanging_shell_is_killed_on_time(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    # an hour's sleep: had the 1 s timeout not killed it, the run would outlast the hang guard (a busy
    # machine stretches fugu's start-up, so the run's wall time is no measure of the kill)
    loopback.script("solo", [tool_reply(call("shell", command="sleep 3600", timeout_s=1)), "timed out"])
    run = fugu(
        "-p",
        "wait",
        "--pool",
        str(_pool(tmp_path, loopback, "solo")),
        "--yes",
        "--output-format",
        "stream-json",
        cwd=repo,
        timeout=900,
    )
    assert run.code == 0, run.stderr
    # bounded by the sleep it proves was cut, not by a guess at this machine's speed: the command's own
    # time in the ledger is a fraction of it (the whole run's wall time is not: at load 24 on two cores
    # starting fugu alone took a minute)
    with sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db") as db:
        (took_ms,) = db.execute("SELECT duration_ms FROM tool_calls WHERE tool = 'shell'").fetchone()
    assert took_ms < 30_000
    tool = next(e for e in run.events() if e["type"] == "user")["message"]["content"][0]
    assert tool["is_error"] and "timed out after 1s" in tool["content"], tool


def test_task_from_stdin_and_text_output(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", ["The answer is 4."])
    run = fugu("--pool", str(_pool(tmp_path, loopback, "solo")), cwd=repo, stdin="what is 2+2?")
    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "The answer is 4."
    assert "↳ solo" in run.stderr
    sent = loopback.requests_for("solo")[0].messages
    assert sent[0]["role"] == "system" and sent[-1] == {"role": "user", "content": "what is 2+2?"}


def test_a_worker_without_a_known_price_is_said_once_and_costs_nothing(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml",
        [{"name": "free", "model": "openai/no-such-priced-model-xyz", "api_base": loopback.base_url}],
    )
    loopback.script("no-such-priced-model-xyz", [tool_reply(call("git_status")), "done"])
    run = fugu("-p", "look", "--pool", str(pool), cwd=repo)
    assert run.code == 0, run.stderr
    warned = [line for line in run.stderr.splitlines() if "no price known" in line]
    assert len(warned) == 1 and warned[0].startswith("! no price known for model openai/no-such-priced")
    assert "Traceback" not in run.stderr


def test_provider_error_on_every_worker_exits_1(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")
    loopback.script("one", [{"fault": 500}])
    loopback.script("two", [{"fault": 401}])
    run = fugu(
        "-p", "x", "--pool", str(_pool(tmp_path, loopback, "one", "two")), "--output-format", "json", cwd=repo
    )
    assert run.code == 1
    result = json.loads(run.stdout)
    assert (
        result["subtype"] == "error_during_execution"
        and "one" in result["result"]
        and "two" in result["result"]
    )


def test_continue_resumes_the_transcript(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = str(_pool(tmp_path, loopback, "solo"))
    loopback.script("solo", ["first answer", "second answer"])
    first = fugu("-p", "remember 42", "--pool", pool, "--output-format", "json", cwd=repo)
    second = fugu("-p", "what did I say?", "--continue", "--output-format", "json", cwd=repo)
    assert second.code == 0, second.stderr
    assert json.loads(first.stdout)["session_id"] == json.loads(second.stdout)["session_id"]
    sent = loopback.requests_for("solo")[1].messages
    assert [m["content"] for m in sent if m["role"] != "system"] == [
        "remember 42",
        "first answer",
        "what did I say?",
    ]


def test_ctrl_c_interrupts_with_130_and_records_the_cut_step(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    import signal
    import subprocess
    import sys

    repo = make_repo(tmp_path / "repo")
    loopback.script("solo", [{"content": "too late", "delay_s": 30}])
    proc = subprocess.Popen(
        [sys.executable, "-m", "fugu_cli", "-p", "slow", "--pool", str(_pool(tmp_path, loopback, "solo"))],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not loopback.requests_for("solo") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loopback.requests_for("solo"), "the request never reached the server"
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert time.monotonic() - started < 10
    shown = fugu("sessions", "show", fugu("sessions", cwd=repo).stdout.split()[0], cwd=repo)
    assert "interrupted" in shown.stdout


def test_pool_lists_usability_and_prices(tmp_path: Path, loopback: LoopbackServer) -> None:
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "local",
                "model": "openai/local",
                "api_base": loopback.base_url,
                "price_in": 0.5,
                "price_out": 1.5,
            },
            {"name": "gone", "model": "openai/gone", "api_base": "http://127.0.0.1:9/v1"},
            {"name": "keyed", "model": "openai/gpt-4o-mini", "api_key_env": "FUGU_TEST_API_KEY"},
        ],
    )
    run = fugu("pool", "--pool", str(pool), "--json", cwd=tmp_path)
    assert run.code == 0, run.stderr
    rows = {r["name"]: r for r in json.loads(run.stdout)["workers"]}
    assert rows["local"]["usable"] and (rows["local"]["price_in"], rows["local"]["price_source"]) == (
        0.5,
        "pool",
    )
    assert not rows["gone"]["usable"] and "no answer" in rows["gone"]["reason"]
    assert not rows["keyed"]["usable"] and rows["keyed"]["reason"] == "FUGU_TEST_API_KEY is not set"
    assert rows["keyed"]["price_source"] == "litellm" and rows["keyed"]["price_in"] == 0.15
    only_bad = write_pool(
        tmp_path / "bad.toml", [{"name": "gone", "model": "openai/x", "api_base": "http://127.0.0.1:9/v1"}]
    )
    run = fugu("pool", "--pool", str(only_bad), cwd=tmp_path)
    assert run.code == 2 and "no usable worker" in run.stderr
    # the user described the workers: what to do is mend those, not set a provider's key
    hint = "start the servers its workers name, set the keys they need, or mend the file (`fugu pool`)"
    assert hint in run.stderr and "ANTHROPIC_API_KEY" not in run.stderr
    run = fugu("-p", "hi", "--pool", str(only_bad), cwd=tmp_path)
    assert run.code == 2 and run.stderr.strip().endswith(f"no answer from http://127.0.0.1:9/v1): {hint}")


def test_a_local_ollama_server_makes_the_pool_when_no_key_is_set(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Tags(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"models": [{"name": "llama3.2:3b"}, {"name": "qwen2.5-coder:7b"}]}).encode()
            self.send_response(200 if self.path == "/api/tags" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Tags)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            "OLLAMA_HOST": f"127.0.0.1:{server.server_address[1]}",
            "FUGU_OLLAMA_MODEL": "qwen2.5-coder:7b",
        }
        run = fugu("pool", "--json", cwd=tmp_path, env=env)
    finally:
        server.shutdown()
    assert run.code == 0, run.stderr
    listed = json.loads(run.stdout)
    assert listed["source"] == "a local Ollama server"
    rows = listed["workers"]
    assert [r["name"] for r in rows] == ["ollama-qwen2.5-coder-7b", "ollama-llama3.2-3b"]
    assert [r["model"] for r in rows] == ["ollama_chat/qwen2.5-coder:7b", "ollama_chat/llama3.2:3b"]
    assert all(r["usable"] for r in rows)


def test_key_values_never_reach_the_store(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    secret = "sk-live-0123456789abcdef"
    loopback.script("solo", [tool_reply(call("read_file", path="notes.txt")), f"the key is {secret}"])
    (repo / "notes.txt").write_text(f"OPENAI_API_KEY={secret}\n")
    pool = _pool(tmp_path, loopback, "solo")
    run = fugu("-p", f"remember {secret}", "--pool", str(pool), cwd=repo, env={"OPENAI_API_KEY": secret})
    assert run.code == 0, run.stderr
    db = Path(os.environ["FUGU_HOME"]) / "fugu.db"
    import sqlite3

    con = sqlite3.connect(db)
    dump = "\n".join(con.iterdump())
    assert secret not in dump and "[OPENAI_API_KEY]" in dump
