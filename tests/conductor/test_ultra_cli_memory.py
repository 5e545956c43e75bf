"""Real CLI: memory from workflow 1 reaches workflow 2 after --continue; text mode shows the plan."""

from __future__ import annotations

from pathlib import Path

from tests.conductor.kit import pool_for, step_requests, tc, write_plan
from tests.helpers import fugu, make_repo, tool_reply


def test_memory_survives_continue_and_text_mode_shows_the_workflow(
    tmp_path: Path, loopback_factory: object
) -> None:
    pool, servers = pool_for(tmp_path, loopback_factory, ["alpha", "beta"])  # type: ignore[arg-type]
    repo = make_repo(tmp_path / "repo")
    servers["alpha"].script(
        "alpha", [tool_reply(tc("c1", "shell", command="echo the-port-is-8123")), "found it"]
    )
    servers["beta"].script("beta", ["USED: port 8123"])
    plan1 = write_plan(tmp_path / "p1.json", [{"worker": "alpha", "subtask": "Find the port.", "access": []}])
    plan2 = write_plan(tmp_path / "p2.json", [{"worker": "beta", "subtask": "Use the port.", "access": []}])
    args = ["--pool", str(pool), "--permission-mode", "full-auto"]

    first = fugu("-p", "find the port", "--plan", str(plan1), *args, cwd=repo)
    assert first.code == 0, first.stderr
    assert first.stdout.strip() == "found it"
    assert "◆ workflow 1 (plan-file, 1 step)" in first.stderr
    assert "0. alpha: Find the port." in first.stderr
    assert "▸ step 0 · alpha started" in first.stderr and "✓ step 0 · alpha · success" in first.stderr
    assert "[0] ↳ alpha" in first.stderr and "$ echo the-port-is-8123" in first.stderr

    second = fugu("-p", "use the port", "--continue", "--plan", str(plan2), *args, cwd=repo)
    assert second.code == 0, second.stderr
    assert "◆ workflow 2 (plan-file, 1 step)" in second.stderr
    seen = step_requests(servers["beta"], "beta")[0].messages[1]["content"]
    assert "Memory from earlier workflows" in seen
    assert "$ echo the-port-is-8123 → exit 0: the-port-is-8123" in seen
    assert "found it" not in seen  # memory carries facts from the environment, not other agents' words
