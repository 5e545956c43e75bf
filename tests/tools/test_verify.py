"""The check's runner and the test-command reader: which commands are a worker's own tests, and the
refusal of a check that cannot work (bash in the sandbox, as the check runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fugu_cli.errors import UsageError
from fugu_cli.tools.sandbox import SandboxPolicy
from fugu_cli.tools.verify import detect_test_command, is_test_command, resolve, run_check, validate


@pytest.mark.parametrize(
    "command",
    [
        "pytest -q",
        "cd src && pytest tests/test_a.py -x",
        ".venv/bin/python -m pytest -q",
        "python3.12 -m unittest discover",
        "PYTHONPATH=. uv run pytest",
        "npm test -- --watch=false",
        "npm run test",
        "go test ./...",
        "cargo test --workspace 2>&1 | tail -20",
        "ruff check . ; make test",
        "./gradlew test",
        "bundle exec rspec spec/a_spec.rb",
    ],
)
def test_test_commands_are_recognised(command: str) -> None:
    assert is_test_command(command)


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "python3 test_calc.py",
        "grep pytest setup.cfg",
        "echo 'npm test'",
        "git commit -m 'make test'",
        "make",
        "cat 'unclosed",
    ],
)
def test_other_commands_are_not(command: str) -> None:
    assert not is_test_command(command)


def test_a_check_that_cannot_work_is_refused(tmp_path: Path) -> None:
    policy = SandboxPolicy()
    validate("python3 -c 'pass' && true", tmp_path, policy)
    validate("FOO=1 true", tmp_path, policy)
    for command, said in (
        ("", "needs a command"),
        ("for x in", "bash cannot parse it"),
        ("no-such-checker-xyz -q", "'no-such-checker-xyz' is not a command here"),
    ):
        with pytest.raises(UsageError, match=said):
            validate(command, tmp_path, policy)


def test_the_check_runs_in_the_repository_and_keeps_the_end_of_its_output(tmp_path: Path) -> None:
    (tmp_path / "flag").write_text("x")
    passed = run_check("test -f flag && echo here", 60, tmp_path, SandboxPolicy())
    assert passed.passed and passed.output.strip() == "here"
    failed = run_check("seq 1 5000; exit 3", 60, tmp_path, SandboxPolicy())
    assert not failed.passed and failed.exit_code == 3 and failed.output.rstrip().endswith("5000")
    assert len(failed.output) <= 4000
    slow = run_check("sleep 30", 0.5, tmp_path, SandboxPolicy())
    assert slow.timed_out and not slow.passed and slow.why() == "timed out"


@pytest.mark.parametrize(
    ("files", "command"),
    [
        ({"pyproject.toml": "[tool.pytest.ini_options]\n"}, "python3 -m pytest -q"),
        ({"conftest.py": "", ".venv/bin/python": ""}, ".venv/bin/python -m pytest -q"),
        ({"setup.cfg": "[tool:pytest]\n"}, "python3 -m pytest -q"),
        ({"package.json": '{"scripts": {"test": "vitest run"}}'}, "npm test"),
        ({"Cargo.toml": "[package]\n"}, "cargo test"),
        ({"go.mod": "module x\n"}, "go test ./..."),
        ({"Makefile": "all:\n\techo\ntest: all\n\tpython3 t.py\n"}, "make test"),
        ({"package.json": '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}'}, None),
        ({"Makefile": "all:\n\techo test:\n", "pyproject.toml": "[project]\n"}, None),
        ({}, None),
    ],
)
def test_the_repositorys_test_command_is_found(
    tmp_path: Path, files: dict[str, str], command: str | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert detect_test_command(tmp_path) == command
    if command is None:
        with pytest.raises(UsageError, match="--check auto: no test command found"):
            resolve("auto", tmp_path)
    else:
        assert resolve(" auto ", tmp_path) == command
    assert resolve(" make check ", tmp_path) == "make check"


def test_the_checks_output_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-verify-0123456789abcdef"
    monkeypatch.setenv("FUGU_TEST_API_KEY", secret)
    (tmp_path / "leak.txt").write_text(f"token={secret}\n")
    verdict = run_check("cat leak.txt; exit 1", 60, tmp_path, SandboxPolicy())
    assert verdict.exit_code == 1 and "token=" in verdict.output and secret not in verdict.output
