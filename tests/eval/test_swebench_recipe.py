"""The SWE-bench recipe (tools/swebench_suite.py, docs/SUITES.md): an instance becomes a task whose repo is
the project at its base commit, whose hidden test patch the check applies, and whose check runs the failing
test (and the ones that must keep passing) with the given interpreter."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fugu_cli.eval import load_suite
from fugu_cli.eval.suite import make_task_repo, prepare_check, run_check
from tests.helpers import BUGGY, FIXED, git
from tools import swebench_suite

EXISTING = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def upstream(root: Path) -> tuple[str, str]:
    """A project with a bug at its first commit and an unrelated later one; and the patch adding the test."""
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "calc.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_existing.py").write_text(EXISTING)
    (root / "conftest.py").write_text("import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    base = git(root, "rev-parse", "HEAD").strip()
    (root / "tests" / "test_fix.py").write_text(NEW_TEST)
    git(root, "add", "-A")
    patch = git(root, "diff", "--cached")
    git(root, "reset", "-q", "--hard")
    (root / "LATER.md").write_text("after the base commit\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "later")
    return base, patch


def test_an_instance_becomes_a_task_whose_hidden_test_decides(tmp_path: Path) -> None:
    base, patch = upstream(tmp_path / "clones" / "acme__calc")
    instance = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "problem_statement": "add() subtracts its arguments instead of adding them.",
        "test_patch": patch,
        "FAIL_TO_PASS": json.dumps(["tests/test_fix.py::test_add"]),
        "PASS_TO_PASS": ["tests/test_existing.py"],
    }
    (tmp_path / "instances.jsonl").write_text(json.dumps(instance) + "\n")
    args = [
        str(tmp_path / "instances.jsonl"),
        "--out",
        str(tmp_path / "swe"),
        "--clones",
        str(tmp_path / "clones"),
    ]
    assert swebench_suite.main([*args, "--python", sys.executable]) == 0

    (task,) = load_suite(tmp_path / "swe").tasks
    assert task.id == "acme__calc-1" and task.prompt.startswith("add() subtracts")
    repo = make_task_repo(task, tmp_path / "run")
    assert not (repo / "LATER.md").exists() and not (repo / "tests" / "test_fix.py").exists()
    prepare_check(task, repo)
    unfixed = run_check(task, repo)
    assert not unfixed.passed and "test_add" in unfixed.output

    repo = make_task_repo(task, tmp_path / "run2")
    (repo / "calc.py").write_text(FIXED)
    prepare_check(task, repo)
    fixed = run_check(task, repo)
    assert fixed.passed, fixed.output
    assert "2 passed" in fixed.output
