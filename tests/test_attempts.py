"""The parts of a checked turn that need no worker: the evidence a worker's own test runs give, and the
route line's reason for an attempt."""

from __future__ import annotations

import json

from fugu_cli.attempts import attempt_reason, own_test_evidence
from fugu_cli.store import ToolCallRow
from fugu_cli.tools.verify import worker_test
from fugu_cli.types import AttemptRecord, TurnResult, Usage


def _row(command: str, exit_code: int | None, *, denied: bool = False, error: bool = False) -> ToolCallRow:
    args = json.dumps({"command": command})
    return ToolCallRow(1, 1, "cheap", "c1", "shell", args, "", error, denied, exit_code, 1.0, ())


def test_the_last_real_test_run_is_the_evidence() -> None:
    rows = [
        _row("pytest -q", 1),
        _row("pytest -q", 0),
        _row("ls", 0),
        _row("pytest -q", None, denied=True),
        _row("pytest -q", 124, error=True),  # killed by its timeout: it says nothing of the tests
    ]
    assert worker_test(rows) is rows[1]
    result = TurnResult("success", "ok", "s", 3, Usage(cost_usd=0.25))
    record = own_test_evidence(result, rows)
    assert record == AttemptRecord("cheap", 0.25, 3, "passed", "worker-test", "pytest -q", 0, None, "success")
    assert own_test_evidence(result, [_row("ls", 0)]) is None
    assert AttemptRecord("a", 0.0, 1, "failed").passed is False and AttemptRecord("a", 0.0, 1).passed is None


def test_the_reason_names_the_failed_attempts() -> None:
    failed = AttemptRecord("cheap", 0.1, 2, "failed", "check")
    assert attempt_reason([], "priority 2") == "first attempt: priority 2"
    assert attempt_reason([failed], "") == "escalates after cheap failed the check"
    assert attempt_reason([failed], "p=0.4").startswith("escalates after cheap failed the check: ")
