"""Shared pieces of the eval executor tests: a loopback provider that answers from the request itself (so runs
in any order, in any process, hear the same words), a small suite with a repo folder and a hidden test, and
the ledger of a session with its ids and clock readings left out."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, ClassVar

from fugu_cli.store import SESSION_TABLES, Store
from tests.helpers import BUGGY, FIXED, TEST, write_pool
from tests.loopback import LoopbackServer

SEQ_BUGGY = "def first_n(n):\n    return list(range(1, n))\n"
SEQ_FIXED = "def first_n(n):\n    return list(range(1, n + 1))\n"
SEQ_TEST = "from seq import first_n\n\nassert first_n(3) == [1, 2, 3], first_n(3)\nprint('ok')\n"
USAGE = {"prompt_tokens": 120, "completion_tokens": 12}
# what differs between two runs of the same job: ids, clocks, durations and where the repo was
VOLATILE = {"id", "session_id", "created_at", "updated_at", "started_at", "finished_at", "latency_ms"}
VOLATILE |= {"duration_ms", "cwd", "checkpoint", "sha"}  # checkpoint, sha: git commits, which hold their time


class Responder(LoopbackServer):
    """`fixer` writes the fix of the task its prompt names, then says "fixed"; `talker` only talks. A task
    in `hold` gets its first request held for `hold_s` (a job to kill or cancel mid-turn)."""

    FIXES: ClassVar[dict[str, tuple[str, str]]] = {
        "calc.py": ("calc.py", FIXED),
        "seq.py": ("seq.py", SEQ_FIXED),
    }

    def __init__(self, hold: tuple[str, ...] = (), hold_s: float = 120.0) -> None:
        super().__init__()
        self.hold = hold
        self.hold_s = hold_s
        self.seen: dict[str, int] = {}
        self.arrived = threading.Condition()

    def next_reply(self, model: str | None, body: Any = None) -> dict[str, Any]:
        messages = body.get("messages", []) if isinstance(body, dict) else []
        text = " ".join(str(m.get("content")) for m in messages if m.get("role") == "user")
        task = next((k for k in self.FIXES if k in text), "")
        with self.arrived:
            first_call = not any(m.get("role") == "tool" for m in messages)
            if first_call:
                self.seen[task] = self.seen.get(task, 0) + 1
            attempt = self.seen.get(task, 0)
            self.arrived.notify_all()
        if (model or "").endswith("talker"):
            return {"content": "It looks fine to me.", "usage": USAGE}
        if not first_call:
            return {"content": "fixed", "usage": USAGE}
        path, content = self.FIXES[task]
        call = {"id": "call_fix", "name": "write_file", "arguments": {"path": path, "content": content}}
        reply: dict[str, Any] = {"content": None, "tool_calls": [call], "usage": USAGE}
        if task in self.hold and attempt == 1:
            reply["delay_s"] = self.hold_s
        return reply

    def wait_for(self, task: str, attempts: int, timeout: float = 120.0) -> None:
        with self.arrived:
            if not self.arrived.wait_for(lambda: self.seen.get(task, 0) >= attempts, timeout):
                raise AssertionError(f"{task}: {self.seen.get(task, 0)} of {attempts} attempts arrived")


def write_suite(root: Path) -> Path:
    """Two tasks: `add` from inline files (its test protected), `first-n` from a repo folder with a hidden
    test."""
    (root / "seq_src").mkdir(parents=True)
    (root / "seq_src" / "seq.py").write_text(SEQ_BUGGY)
    (root / "suite.toml").write_text(
        f"""name = "mini"
[[tasks]]
id = "add"
prompt = "Fix calc.py so that python3 test_calc.py passes."
check = "python3 test_calc.py"
protected = ["test_calc.py"]
files = {{ "calc.py" = {json.dumps(BUGGY)}, "test_calc.py" = {json.dumps(TEST)} }}

[[tasks]]
id = "first-n"
prompt = "first_n in seq.py should return [1, ..., n]: fix seq.py."
check = "python3 test_seq.py"
repo = "seq_src"
hidden = {{ "test_seq.py" = {json.dumps(SEQ_TEST)} }}
"""
    )
    return root


def write_responder_pool(path: Path, server: LoopbackServer) -> Path:
    """fixer (preferred by the prior) and talker, both on `server`."""
    return write_pool(
        path,
        [
            {
                "name": name,
                "model": f"openai/{name}",
                "api_base": server.base_url,
                "priority": priority,
                "price_in": 1.0,
                "price_out": 2.0,
            }
            for name, priority in (("fixer", 2), ("talker", 1))
        ],
    )


def ledger(store: Store, sid: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the session in every session table, without the columns that differ between runs."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for table, (key, _) in SESSION_TABLES.items():
        rows = store.query(f"SELECT * FROM {table} WHERE {key}=? ORDER BY rowid", (sid,))
        keep = [[v for c, v in zip(r.keys(), tuple(r), strict=True) if c not in VOLATILE] for r in rows]
        out[table] = [tuple(row) for row in keep]
    return out
