"""Helpers for ultra-mode tests: loopback workers, a pool file, plans, what each server received."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.helpers import write_pool
from tests.loopback import LoopbackServer, RecordedRequest

# the models pool_for gives the workers these tests name, written out: the run's seed of litellm's answers
# (tests/conftest.py) holds the models the tests name literally, so no fugu run imports litellm to ask of them
MODELS = ("openai/alpha", "openai/beta", "openai/gamma", "openai/delta")


def pool_for(
    tmp_path: Path, make: Callable[[], LoopbackServer], names: Sequence[str]
) -> tuple[Path, dict[str, LoopbackServer]]:
    """One loopback server per worker; the first name gets the highest priority (the default conductor)."""
    missing = [n for n in names if f"openai/{n}" not in MODELS]
    assert not missing, f"name openai/{missing[0]} in MODELS"
    servers = {name: make() for name in names}
    workers = [
        {
            "name": n,
            "model": f"openai/{n}",
            "api_base": s.base_url,
            "description": f"worker {n}",
            "priority": len(names) - i,
            "price_in": 1.0,
            "price_out": 2.0,
        }
        for i, (n, s) in enumerate(servers.items())
    ]
    return write_pool(tmp_path / "pool.toml", workers), servers


def write_plan(path: Path, steps: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"steps": steps}))
    return path


def text_of(request: RecordedRequest) -> str:
    """Everything a request carried in its messages (contents, tool calls and their ids), as one string."""
    return json.dumps(request.messages)


def step_requests(server: LoopbackServer, model: str, marker: str = "Your subtask") -> list[RecordedRequest]:
    """The requests of workflow-step agents (not the conductor's) that reached `server` for `model`."""
    return [r for r in server.requests_for(model) if r.messages and marker in json.dumps(r.messages[:2])]


def tc(id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}
