"""What the `fugu serve` tests share: a pool on a loopback server, an in-process server in a fresh git repo
(the `serve` fixture), plain-HTTP helpers and the store's rows."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.options import RunOptions, permission_mode
from fugu_cli.serve import FuguServer, ServeOptions
from tests.helpers import make_repo, write_pool
from tests.loopback import LoopbackServer

KEY = "sk-fugu-test-key"
Serve = Callable[..., FuguServer]


def pool_file(tmp_path: Path, server: LoopbackServer, *names: str) -> Path:
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "api_base": server.base_url,
            "description": f"worker {n}",
            "priority": len(names) - i,
            "price_in": 1.0,
            "price_out": 2.0,
        }
        for i, n in enumerate(names)
    ]
    return write_pool(tmp_path / "pool.toml", workers)


def no_retries() -> None:
    """Workers fail at once (no backoff): failover tests stay fast."""
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Starts an in-process `fugu serve` on an ephemeral port in a fresh git repo; stops it after the test."""
    servers: list[FuguServer] = []

    def start(pool: Path, **options: Any) -> FuguServer:
        repo = tmp_path / "repo"
        if not repo.exists():
            make_repo(repo)
        mode = permission_mode(options.pop("permission_mode", "read-only"))
        turns = options.pop("max_turns", None)
        run = RunOptions(cwd=repo, pool=str(pool), permission_mode=mode, max_turns=turns)
        server = FuguServer(ServeOptions(run=run, port=0, **options)).start()
        servers.append(server)
        _live.append(server)
        return server

    yield start
    for server in servers:
        _live.remove(server)
        server.stop()


_live: list[FuguServer] = []  # the `serve` fixture's servers: `rows` waits for the rows they hold back


def written(limit_s: float = 10.0) -> None:
    """Wait until the in-process servers wrote the rows of every call they answered: a whole pass-through
    reply served from the event loop is sent before its rows are written (`passthrough.Held`)."""
    deadline = time.monotonic() + limit_s
    for server in _live:
        made = server.hub.made_passthrough()
        while made is not None and made.unwritten and time.monotonic() < deadline:
            time.sleep(0.005)
        assert made is None or not made.unwritten, f"{made.unwritten} calls' rows still unwritten"


def post(
    url: str, body: dict[str, Any], headers: dict[str, str] | None = None, path: str = "/chat/completions"
) -> tuple[int, Any, Any]:
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            raw = reply.read().decode()
            kind = reply.headers.get("Content-Type", "")
            data = sse_events(raw) if kind.startswith("text/event-stream") else json.loads(raw)
            return reply.status, data, reply.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def sse_events(raw: str) -> list[Any]:
    out: list[Any] = []
    for block in raw.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                payload = line.removeprefix("data: ")
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def ask(task: str, model: str = "fugu", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": task}], **extra}


def rows(sql: str, *args: Any) -> list[tuple[Any, ...]]:
    written()
    with sqlite3.connect(Path(os.environ["FUGU_HOME"]) / "fugu.db") as conn:
        return list(conn.execute(sql, args).fetchall())
