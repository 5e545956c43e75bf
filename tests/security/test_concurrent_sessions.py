"""Several `fugu -p --continue` at once on one session take turns: nothing is lost or interleaved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fugu_cli.store import Store
from tests.helpers import fugu, make_repo, write_pool
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
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fugu_cli", "-p", f"task {n}", "--continue", "--pool", str(pool)],
            cwd=repo,
            env=dict(os.environ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(6)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [o[1].decode()[-500:] for o in outs]
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
