"""Issue 10, findings 7 and 9: an edit changes only the bytes it means to and the approval diff shows them;
a write killed at any moment leaves the old content or the new, never a torn file."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fugu_cli.tools import Answer, ApprovalRequest, ToolContext
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


def test_a_latin1_edit_keeps_untouched_lines_and_the_diff_is_the_truth(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    original = "# -*- coding: latin-1 -*-\nname = 'Ren\xe9e'\ncity = 'Z\xfcrich'\ncount = 1\n".encode(
        "latin-1"
    )
    (repo / "legacy.py").write_bytes(original)
    seen: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> Answer:
        seen.append(request)
        return "yes"

    result = call(
        "edit_file",
        ctx=make_ctx("ask", approve=approve),
        path="legacy.py",
        old_text="count = 1",
        new_text="count = 2",
    )
    assert not result.is_error, result.content
    assert (repo / "legacy.py").read_bytes() == original.replace(b"count = 1", b"count = 2")
    (request,) = seen
    changed = [
        ln for ln in request.detail.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
    ]
    assert changed == ["-count = 1", "+count = 2"]
    assert "Renée" in request.detail and "\ufffd" not in request.detail


WRITER = """
import json, sys
from pathlib import Path
from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import ToolCall
root, size = Path(sys.argv[1]), int(sys.argv[2])
content = ("B" * (size // 2) + "\\n") * 2
ctx = ToolContext(root=root, agent="w", policy=PermissionPolicy(mode="full-auto"))
call = ToolCall("w", "write_file", json.dumps({"path": "big.txt", "content": content}))
print("start", flush=True)
ToolRegistry.default().run(call, ctx)
print("done", flush=True)
"""


def test_kill_9_during_a_big_write_leaves_old_or_new_never_a_torn_file(repo: Path) -> None:
    size = 16_000_000
    old = ("A" * (size // 2) + "\n") * 2
    new = ("B" * (size // 2) + "\n") * 2
    target = repo / "big.txt"
    target.write_text(old)

    def run(kill_after: float | None) -> float:
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(repo), str(size)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == "start\n"
        started = time.monotonic()
        if kill_after is None:
            assert proc.stdout.readline() == "done\n"
        else:
            time.sleep(kill_after)
            proc.kill()
        proc.wait()
        proc.stdout.close()
        return time.monotonic() - started

    full = run(None)
    assert target.read_text() == new
    target.write_text(old)
    # the first write can be the slower one (cold caches): kills timed by it alone all landed after the end
    full = min(full, run(None))
    outcomes: list[str] = []
    for i in range(6):
        target.write_text(old)
        for leftover in repo.glob(".big.txt.*.fugu-tmp"):
            leftover.unlink()
        run(full * (i + 1) / 7)
        data = target.read_bytes()
        assert data in (old.encode(), new.encode()), f"torn: {len(data)} bytes after a kill at {i + 1}/7"
        outcomes.append("new" if data == new.encode() else "old")
    assert "old" in outcomes  # some kills landed mid-write, and the old content was intact
