"""One code path calls workers: the same silent worker, driven through `fugu -p` (a subprocess, as a user runs
it) and through `fugu serve`'s pass-through (model `fugu`, whole and streamed), fails over the same way after
`[llm] first_byte_timeout_s`; and a dead worker cools down across serve requests. Real HTTP on loopback, a
real listener that never answers, the real CLI and server."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.helpers import fugu, make_repo, write_pool
from tests.loopback import LoopbackServer, SilentServer
from tests.serve_kit import Serve, ask, pool_file, post, rows


def _config(text: str) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(text)


def _routes(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["worker"], e["source"]) for e in events if e.get("subtype") == "route"]


def test_a_silent_worker_fails_over_alike_in_fugu_p_and_in_fugu_serve(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    # no cool-down: each path meets the silent worker itself (1.5 s: a loaded machine is slow to answer too)
    _config("[llm]\nfirst_byte_timeout_s = 1.5\ncooldown_s = 0\n")
    silent = SilentServer()
    rows_ = [
        {"name": "one", "model": "openai/one", "api_base": silent.base_url, "priority": 2},
        {"name": "two", "model": "openai/two", "api_base": loopback.base_url, "priority": 1},
    ]
    pool = write_pool(tmp_path / "pool.toml", [r | {"price_in": 1.0, "price_out": 1.0} for r in rows_])
    loopback.script("two", ["two, from fugu -p", "two, from serve", "two, streamed"])
    repo = make_repo(tmp_path / "repo")
    try:
        run = fugu("-p", "x", "--pool", str(pool), "--output-format", "stream-json", cwd=repo)
        assert run.code == 0, run.stderr
        events = run.events()
        assert _routes(events) == [("one", "prior"), ("two", "fallback")]
        [failed] = [e for e in events if e.get("subtype") == "provider_error"]
        assert "sent nothing for 1.5 s" in failed["error"]
        assert silent.posts == 1

        server = serve(pool)
        status, body, _ = post(server.url, ask("x"))
        assert status == 200, body
        assert body["choices"][0]["message"]["content"] == "two, from serve"
        assert (body["fugu"]["worker"], body["fugu"]["failed"]) == ("two", ["one"])
        assert silent.posts == 2  # asked once, cut after the first-byte limit, not retried

        status, chunks, _ = post(server.url, ask("x", stream=True))
        assert status == 200
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c != "[DONE]" and c["choices"]
        )
        assert text == "two, streamed" and silent.posts == 3
    finally:
        silent.close()
    cut = rows("SELECT text FROM steps WHERE status = 'provider_error' ORDER BY rowid")
    assert len(cut) == 3 and all("sent nothing for 1.5 s" in t for (t,) in cut)


def test_a_dead_worker_is_asked_once_across_three_serve_requests(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    _config("[llm]\nmax_retries = 3\nbackoff_base_s = 0\n")
    loopback.script("alpha", [{"fault": 503}] * 8)
    loopback.script("beta", ["one", "two", "three"])
    server = serve(pool_file(tmp_path, loopback, "alpha", "beta"))
    replies = [post(server.url, ask(f"request {i}")) for i in range(3)]
    assert [status for status, _, _ in replies] == [200, 200, 200]
    assert [body["choices"][0]["message"]["content"] for _, body, _ in replies] == ["one", "two", "three"]
    assert len(loopback.requests_for("alpha")) == 4  # the first request's 4 attempts; then it cools down
    later = [body["fugu"] for _, body, _ in replies[1:]]
    assert all("failed" not in f and 0 < f["cooling"]["alpha"]["retry_in_s"] <= 30 for f in later)


def test_a_providers_error_code_reaches_the_serve_client_unchanged(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    too_long = {"fault": 400, "code": "context_length_exceeded", "message": "maximum context length is 8k"}
    loopback.script("alpha", [too_long, too_long])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    for body in (ask("x" * 100), ask("x" * 100, stream=True)):
        status, data, _ = post(server.url, body)
        assert status == 400, data
        assert data["error"]["code"] == "context_length_exceeded" and "8k" in data["error"]["message"]
    assert len(loopback.requests_for("alpha")) == 2  # a refusal is never retried


def test_a_worker_that_failed_is_skipped_by_the_next_run_and_shown_by_fugu_pool(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    _config("[llm]\nmax_retries = 0\ncooldown_s = 600\n")  # long enough for four slow processes
    loopback.script("alpha", [{"fault": 503}])
    loopback.script("beta", ["beta, first run", "beta, second run"])
    pool = pool_file(tmp_path, loopback, "alpha", "beta")
    repo = make_repo(tmp_path / "repo")
    first = fugu("-p", "x", "--pool", str(pool), "--output-format", "stream-json", cwd=repo)
    assert first.code == 0 and _routes(first.events()) == [("alpha", "prior"), ("beta", "fallback")]
    second = fugu("-p", "y", "--pool", str(pool), "--output-format", "stream-json", cwd=repo)
    assert second.code == 0 and len(loopback.requests_for("alpha")) == 1  # another process: alpha not asked
    [route] = [e for e in second.events() if e.get("subtype") == "route"]
    assert route["worker"] == "beta" and "alpha cooling down" in route["reason"]

    shown = fugu("pool", "--pool", str(pool), "--json", cwd=repo)
    health = {w["name"]: w["health"] for w in json.loads(shown.stdout)["workers"]}
    assert health["beta"] == {"state": "ok"} and health["alpha"]["state"] == "cooling"
    assert health["alpha"]["failures"] == 1 and "503" in health["alpha"]["error"]
    assert "cooling down" in fugu("pool", "--pool", str(pool), cwd=repo).stdout
    reset = fugu("pool", "--pool", str(pool), "--json", "--reset-health", cwd=repo)
    assert "forgot the failures of 1 worker(s)" in reset.stderr
    assert {w["health"]["state"] for w in json.loads(reset.stdout)["workers"]} == {"ok"}
