"""Issue 10, findings 11 and 12: a catastrophic regex, a FIFO or a device cannot hang a tool or outlive
Ctrl-C; file names that are not UTF-8 are shown escaped and can be read back, never a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import search
from fugu_cli.types import ToolResult

Call = Callable[..., ToolResult]


# Only a guard against hanging the suite: what these tests measure is CPU time, which a busy machine does
# not stretch (the guard stops a search after SLICE_S of wall time, so it cannot use more CPU than that).
CEILING_S = 120.0


def within(seconds: float, fn: Callable[[], ToolResult]) -> ToolResult:
    """Run `fn` in a thread; fail (instead of hanging the suite) if it has not returned in `seconds`."""
    box: list[ToolResult] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"still running after {seconds} s"
    return box[0]


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(a|a?)+$"])
def test_a_catastrophic_regex_is_stopped_and_says_why(repo: Path, call: Call, pattern: str) -> None:
    (repo / "evil.txt").write_text("a" * 5000 + "!\n")
    cpu = time.process_time()
    result = within(CEILING_S, lambda: call("grep", pattern=pattern))
    used = time.process_time() - cpu
    assert "search stopped" in result.content and "simplify" in result.content
    assert used < search.SLICE_S + 2, f"{used:.1f} s of CPU: the search ran past its slice"


GREP_IN_A_CHILD = """
import sys
from pathlib import Path
from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.base import Invocation
from fugu_cli.tools.search import grep
ctx = ToolContext(root=Path(sys.argv[1]), agent="a", policy=PermissionPolicy(mode="read-only"))
print("searching", flush=True)
try:
    grep(Invocation(ctx, "grep", "read"), r"(a|aa)+$")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_stops_a_runaway_grep(repo: Path) -> None:
    for i in range(40):
        (repo / f"evil{i}.txt").write_text("a" * 5000 + "!\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", GREP_IN_A_CHILD, str(repo)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "searching\n"
    time.sleep(0.5)
    children_before = _children_cpu()
    at_signal = _cpu_of(proc.pid)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=CEILING_S) == 130
    after_signal = _children_cpu() - children_before - at_signal
    assert after_signal < search.SLICE_S + 1, f"{after_signal:.1f} s of CPU after Ctrl-C"
    assert proc.stdout.read() == "interrupted\n"
    proc.stdout.close()


def _cpu_of(pid: int) -> float:
    """CPU seconds a live process and the children it has reaped have used (from /proc, as rusage counts)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("tool", ["read_file", "grep", "edit_file", "write_file"])
def test_a_fifo_never_blocks_a_file_tool(repo: Path, call: Call, tool: str) -> None:
    os.mkfifo(repo / "pipe")
    args = {
        "read_file": {"path": "pipe"},
        "grep": {"pattern": "x", "path": "pipe"},
        "edit_file": {"path": "pipe", "old_text": "a", "new_text": "b"},
        "write_file": {"path": "pipe", "content": "x"},
    }[tool]
    result = within(CEILING_S, lambda: call(tool, **args))
    assert "FIFO" in result.content or "No matches" in result.content


def test_links_to_devices_stay_outside(repo: Path, call: Call) -> None:
    (repo / "zero").symlink_to("/dev/zero")
    result = within(CEILING_S, lambda: call("read_file", path="zero"))
    assert result.is_error and "outside the repository" in result.content


def test_non_utf8_names_through_glob_grep_and_read_file(repo: Path, call: Call) -> None:
    folder = os.fsencode(str(repo)) + b"/d\xe9j\xe0"
    os.mkdir(folder)
    with open(folder + b"/r\xe9sum\xe9.txt", "wb") as f:
        f.write(b"needle in a latin-1 name\n")
    with open(os.fsencode(str(repo)) + b"/bad-\xff\xfe.md", "wb") as f:
        f.write(b"caf\xe9 needle\n")
    listed = call("glob", pattern="**/*")
    assert not listed.is_error
    assert "d\\xe9j\\xe0/r\\xe9sum\\xe9.txt" in listed.content and "bad-\\xff\\xfe.md" in listed.content
    found = call("grep", pattern="needle")
    assert "bad-\\xff\\xfe.md:1: caf\ufffd needle" in found.content
    assert "d\\xe9j\\xe0/r\\xe9sum\\xe9.txt:1: needle" in found.content
    read = call("read_file", path="d\\xe9j\\xe0/r\\xe9sum\\xe9.txt")
    assert read.content == "     1\tneedle in a latin-1 name"
    for result in (listed, found, read):
        json.dumps(result.content, ensure_ascii=False).encode("utf-8")  # what a provider request does
