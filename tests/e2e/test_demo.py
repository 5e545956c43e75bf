"""`fugu demo` replays a recorded session offline: real router, tools, git and ledger; scripted words."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import fugu


def test_demo_fixes_the_bug_with_a_failover_and_records_it(tmp_path: Path) -> None:
    run = fugu("demo", cwd=tmp_path)
    assert run.code == 0, run.stderr
    assert "(exit 1)" in run.stdout  # the first test run really failed
    assert (
        "fallback" in run.stdout and "-    return a - b" in run.stdout and "+    return a + b" in run.stdout
    )
    session_id = run.stdout.rsplit("fugu sessions show ", 1)[1].split()[0]
    shown = fugu("sessions", "show", session_id, cwd=tmp_path)
    assert "provider_error" in shown.stdout and "gpt-5-mini: edit calc.py" in shown.stdout
