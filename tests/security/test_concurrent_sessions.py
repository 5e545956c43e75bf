"""Several `fugu -p --continue` at once on one session take turns: nothing is lost or interleaved."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fugu_cli.store import Store
from tests.helpers import Run, fugu, make_repo, write_pool
from tests.loopback import LoopbackServer


def test_concurrent_continues_serialise_and_keep_every_message(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo", "api_base": loopback.base_url}]
    )
    loopback.script("solo", [f"answer {i}" for i in range(7)])
    assert fugu("-p", "first", "--pool", str(pool), cwd=repo).code == 0

    def go(n: int) -> Run:
        return fugu("-p", f"task {n}", "--continue", "--pool", str(pool), cwd=repo, timeout=240)

    with ThreadPoolExecutor(6) as threads:  # six processes at once, each forked as it is asked for
        runs = list(threads.map(go, range(6)))
    assert [r.code for r in runs] == [0] * 6, [r.stderr[-500:] for r in runs]
    store = Store(Path(os.environ["FUGU_HOME"]) / "fugu.db")
    (session,) = store.list_sessions()
    messages = [m for _, m in store.load_messages(session.id)]
    users = [m.content or "" for m in messages if m.role == "user"]
    assert users[0] == "first" and sorted(users[1:]) == sorted(f"task {n}" for n in range(6))
    assert [m.role for m in messages] == ["system"] + ["user", "assistant"] * 7  # turns never interleaved
    # each turn saw every earlier one: the last request carried all seven tasks
    last = max(loopback.requests_for("solo"), key=lambda r: len(r.messages))
    assert len([m for m in last.messages if m["role"] == "user"]) == 7
    assert [tuple(r) for r in store.query("SELECT turn FROM turns ORDER BY turn")] == [
        (t,) for t in range(1, 8)
    ]
