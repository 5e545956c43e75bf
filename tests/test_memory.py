"""Memory: facts distilled from real tool calls in a real ledger, kept latest-per-key, shown compactly."""

from __future__ import annotations

import json
from pathlib import Path

from fugu_cli import memory
from fugu_cli.ledger import Ledger
from fugu_cli.store import Store
from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import ToolCall
from tests.helpers import BUGGY, make_repo

SID = "s1"


def run_calls(
    store: Store, repo: Path, scope: str, agent: str, calls: list[tuple[str, dict[str, object]]]
) -> None:
    registry = ToolRegistry.default()
    ctx = ToolContext(root=repo, agent=agent, policy=PermissionPolicy(mode="full-auto"))
    ledger = Ledger(store, SID, scope)
    for n, (name, args) in enumerate(calls):
        call = ToolCall(f"c{n}", name, json.dumps(args))
        ledger.turn(1).tool_call(n + 1, agent, call, registry.run(call, ctx))


def test_facts_from_reads_commands_tests_and_the_applied_patch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = Store(tmp_path / "fugu.db")
    (repo / "test_x.py").write_text("print('3 passed in 0.01s')\n")
    run_calls(
        store,
        repo,
        "wf1.s0",
        "alpha",
        [
            ("read_file", {"path": "calc.py"}),
            ("read_file", {"path": "test_calc.py", "start_line": 2, "end_line": 3}),
            ("shell", {"command": "python3 test_calc.py"}),
            ("shell", {"command": "python3 -m pytest_like test_x.py || python3 test_x.py"}),
            ("read_file", {"path": "missing.py"}),
            ("grep", {"pattern": "add"}),
        ],
    )
    patch = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n-x\n+y\n+z\n"
    kept = memory.distil(store, SID, 1, ["wf1.s0"], memory.facts_from_patch(patch, "beta"))
    facts = {(f.kind, f.key): f for f in memory.facts(store, SID)}
    assert kept == len(facts) == 6
    assert facts[("read", "calc.py")].value == f"sha1 {memory.text_hash(BUGGY)}, 2 lines"
    assert memory.text_hash(BUGGY) == memory.file_hash(repo / "calc.py")
    assert facts[("read", "test_calc.py")].value == "lines 2-3 read"
    failing = facts[("command", "python3 test_calc.py")].value
    assert failing.startswith("exit 1: AssertionError: add(2, 3) should be 5")
    assert (
        facts[("test", "python3 -m pytest_like test_x.py || python3 test_x.py")].value == "3 passed in 0.01s"
    )
    assert facts[("edit", "calc.py")] == memory.Fact("edit", "calc.py", "+2 -1", "beta", 1)
    assert ("read", "missing.py") not in facts  # an error teaches nothing about the tree


def test_latest_fact_per_key_wins_and_changed_files_are_marked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = Store(tmp_path / "fugu.db")
    run_calls(
        store,
        repo,
        "wf1.s0",
        "alpha",
        [("shell", {"command": "python3 test_calc.py"}), ("read_file", {"path": "calc.py"})],
    )
    memory.distil(store, SID, 1, ["wf1.s0"])
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    run_calls(store, repo, "wf2.s0", "beta", [("shell", {"command": "python3 test_calc.py"})])
    memory.distil(store, SID, 2, ["wf2.s0"])
    block = memory.context_block(store, SID, repo)
    assert block.startswith("Memory from earlier workflows")
    assert "$ python3 test_calc.py → exit 0: ok" in block and "exit 1" not in block
    assert f"read calc.py: sha1 {memory.text_hash(BUGGY)}, 2 lines (changed since)" in block
    assert memory.last_workflow(store, SID) == 2
    shown = memory.render(store, SID)
    assert "workflow 1:\n  read calc.py" in shown and "[alpha]" in shown and "workflow 2:" in shown
    assert memory.render(store, "other").startswith("No memory yet")
    assert memory.context_block(store, "other") == ""


def test_the_block_stays_compact(tmp_path: Path) -> None:
    store = Store(tmp_path / "fugu.db")
    facts = [memory.Fact("command", f"echo {i} {'x' * 80}", "exit 0", "alpha") for i in range(200)]
    memory.record(store, SID, 1, facts)
    assert len(memory.facts(store, SID)) == memory.MAX_FACTS
    block = memory.context_block(store, SID, max_chars=1000)
    assert len(block) <= 1100 and block.splitlines()[-1].startswith("- … ")
    assert "echo 199" in block  # newest first
