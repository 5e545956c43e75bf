"""What judges an attempt's work: a check command run in the sandbox (`run_check`, and `validate`, which
refuses one that cannot work before anyone is paid; `detect_test_command` for `--check auto`), and which
shell commands are a worker's own tests (`is_test_command`, `worker_test`: the evidence of a turn without a
check).

Runs commands only through the sandbox; decides nothing about what follows a verdict (fugu_cli/attempts.py).
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.errors import UsageError
from fugu_cli.redact import redact
from fugu_cli.store import ToolCallRow
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.sandbox import SandboxPolicy

OUTPUT_TAIL = 4000  # characters of a check's output kept (the end, where test runners summarise)
NOT_FOUND = (126, 127)  # bash: the command could not be run (not executable, not found)

# The test runners whose exit code counts as a worker's own evidence: a command's words start with one of
# these (after VAR=value assignments and a `uv run` / `poetry run` / `pipenv run` / `hatch run` wrapper).
TEST_RUNNERS: tuple[tuple[str, ...], ...] = (
    ("pytest",),
    ("py.test",),
    ("python", "-m", "pytest"),
    ("python", "-m", "unittest"),
    ("tox",),
    ("nox",),
    ("npm", "test"),
    ("npm", "t"),
    ("npm", "run", "test"),
    ("yarn", "test"),
    ("pnpm", "test"),
    ("npx", "jest"),
    ("npx", "vitest"),
    ("jest",),
    ("vitest",),
    ("mocha",),
    ("go", "test"),
    ("cargo", "test"),
    ("cargo", "nextest"),
    ("make", "test"),
    ("make", "check"),
    ("ctest",),
    ("mvn", "test"),
    ("gradle", "test"),
    ("gradlew", "test"),
    ("rspec",),
    ("bundle", "exec", "rspec"),
    ("rake", "test"),
    ("phpunit",),
    ("dotnet", "test"),
    ("mix", "test"),
)
_WRAPPERS = (("uv", "run"), ("poetry", "run"), ("pipenv", "run"), ("hatch", "run"))
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*$")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")"})


@dataclass(frozen=True)
class Verdict:
    """How the check ran on one attempt."""

    exit_code: int | None
    output: str
    timed_out: bool = False
    cancelled: bool = False

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def why(self) -> str:
        if self.timed_out:
            return "timed out"
        return f"exit code {self.exit_code}"


def run_check(
    command: str, timeout_s: float, root: Path, policy: SandboxPolicy, cancel: threading.Event | None = None
) -> Verdict:
    """Run the check `command` in the sandbox, in the repository root, to its end or its timeout. Its output
    is redacted (a worker reads it) and cut to its last OUTPUT_TAIL characters."""
    done = sb.run(["bash", "-c", command], cwd=root, policy=policy, timeout=timeout_s, cancel=cancel)
    text = redact(done.output.decode("utf-8", "replace"))
    return Verdict(done.exit_code, text[-OUTPUT_TAIL:], done.timed_out, done.cancelled)


def validate(command: str, root: Path, policy: SandboxPolicy) -> None:
    """Refuse a check that cannot work, before any worker is paid: no command, bash cannot parse it, or
    its first command is not found (asked of bash in the sandbox, as the check will run)."""
    command = command.strip()
    if not command:
        raise UsageError("--check needs a command, e.g. --check 'pytest -q'")
    parsed = sb.run(["bash", "-n", "-c", command], cwd=root, policy=policy, timeout=30)
    if parsed.exit_code != 0:
        said = parsed.output.decode("utf-8", "replace").strip().splitlines()
        raise UsageError(
            f"--check {command!r}: bash cannot parse it ({said[-1] if said else 'syntax error'})"
        )
    first = _first_word(command)
    if first is None:
        return
    found = sb.run(["bash", "-c", 'command -v -- "$1"', "check", first], cwd=root, policy=policy, timeout=30)
    if found.exit_code != 0:
        raise UsageError(f"--check {command!r}: {first!r} is not a command here (not found in the sandbox)")


def _first_word(command: str) -> str | None:
    """The first command's name, when it is a plain word (None: something bash expands, or none)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    for word in words:
        if _ASSIGNMENT.match(word):
            continue
        return word if re.fullmatch(r"[A-Za-z0-9_./+-]+", word) else None
    return None


# --- a worker's own tests as evidence -----------------------------------------------------------------


def is_test_command(command: str) -> bool:
    """Whether a shell command runs a test runner (TEST_RUNNERS), anywhere in a `&&`/`;`/`|` chain."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return False
    segment: list[str] = []
    for word in [*words, ";"]:
        if word in _SEPARATORS:
            if _runs_tests(segment):
                return True
            segment = []
        else:
            segment.append(word)
    return False


def _runs_tests(words: list[str]) -> bool:
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    for wrapper in _WRAPPERS:
        if tuple(words[: len(wrapper)]) == wrapper:
            words = words[len(wrapper) :]
    if not words:
        return False
    head = words[0].rsplit("/", 1)[-1]
    normal = ["python" if _PYTHON.match(head) else head, *words[1:]]
    return any(tuple(normal[: len(r)]) == r for r in TEST_RUNNERS)


def worker_test(calls: Sequence[ToolCallRow]) -> ToolCallRow | None:
    """The last shell call among `calls` that ran a test command to its exit code (not refused, not killed
    by a timeout or an interrupt)."""
    for row in reversed(calls):
        if row.tool != "shell" or row.denied or row.is_error or row.exit_code is None:
            continue
        try:
            command = json.loads(row.arguments or "{}").get("command", "")
        except (ValueError, AttributeError):
            continue
        if isinstance(command, str) and is_test_command(command):
            return row
    return None


# --- the repository's own test command (`--check auto`) ------------------------------------------------

_NPM_DEFAULT = "no test specified"  # what `npm init` writes as the test script


def resolve(command: str, root: Path) -> str:
    """The check `command` stands for: itself, or for "auto" the repository's test command."""
    command = command.strip()
    if command != "auto":
        return command
    found = detect_test_command(root)
    if found is None:
        raise UsageError(
            f"--check auto: no test command found in {root} (pytest, npm test, cargo test, go test, make "
            "test); name one: --check 'CMD'"
        )
    return found


def detect_test_command(root: Path) -> str | None:
    """The command that runs this repository's tests, from its files (None: none found). In order: pytest
    (a `[tool.pytest...]` table, pytest.ini, conftest.py, `[tool:pytest]` in setup.cfg, `[pytest]` in
    tox.ini; through .venv/bin/python when the repository has that virtual environment), `npm test` (a
    package.json test script other than npm's placeholder), `cargo test`, `go test ./...`, `make test` (a
    Makefile with a `test:` target)."""
    if _uses_pytest(root):
        python = ".venv/bin/python" if (root / ".venv" / "bin" / "python").is_file() else "python3"
        return f"{python} -m pytest -q"
    script = _read_json(root / "package.json").get("scripts", {})
    test = script.get("test") if isinstance(script, dict) else None
    if isinstance(test, str) and test.strip() and _NPM_DEFAULT not in test:
        return "npm test"
    if (root / "Cargo.toml").is_file():
        return "cargo test"
    if (root / "go.mod").is_file():
        return "go test ./..."
    for name in ("GNUmakefile", "makefile", "Makefile"):
        if re.search(r"^test\s*:", _read(root / name), re.MULTILINE):
            return "make test"
    return None


def _uses_pytest(root: Path) -> bool:
    return (
        "[tool.pytest" in _read(root / "pyproject.toml")
        or (root / "pytest.ini").is_file()
        or (root / "conftest.py").is_file()
        or "[tool:pytest]" in _read(root / "setup.cfg")
        or "[pytest]" in _read(root / "tox.ini")
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return ""


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(_read(path) or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
