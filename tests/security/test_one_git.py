"""Issue 22, finding 1: git had ways around the hardened wrapper (the repo map's `git ls-files`, eval's task
repos, the demo), and a plain `fugu -p` in a hostile clone ran the clone's `core.fsmonitor` on the host.

Now `gitrun.git` is the only way fugu starts git (a scan of the package's source holds every other module to
it), and no fugu command runs a clone's fsmonitor, hooks or filters: `-p` in every permission mode with the
sandbox on and off, the REPL after "no" to the trust question, `doctor`, `eval` and `--ultra`."""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import fugu_cli
from tests.conductor.kit import write_plan
from tests.helpers import call, fugu, git, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.ui.test_repl_pty import PROMPT, SLOW, Term

PACKAGE = Path(fugu_cli.__file__).parent
WRAPPER = PACKAGE / "tools" / "gitrun.py"
ACTION = PACKAGE.parent / "action"
# every way Python starts a process (subprocess, os, asyncio, pty) and the sandbox's own entry points
SPAWNERS = frozenset(
    {
        "run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput", "system",
        "popen", "spawn", "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe",
        "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn",
        "posix_spawnp", "create_subprocess_exec", "create_subprocess_shell", "split", "which",
    }
)  # fmt: skip


def _is_git(node: ast.AST) -> bool:
    """`"git"` or `"/usr/bin/git"`."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    return node.value == "git" or node.value.endswith("/git")


def _names_git(node: ast.AST) -> bool:
    """git, or a command line that starts with it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        first = node.value.strip().split(" ", 1)[0]
        return first == "git" or first.endswith("/git")
    if isinstance(node, ast.JoinedStr) and node.values:
        return _names_git(node.values[0])
    return False


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def git_spawns(source: str) -> list[int]:
    """Lines that start git (or set up a git command line) other than through the wrapper: a list or tuple
    whose first item is git, a process started with a git command line, a name bound to "git"."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and _is_git(node.elts[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and _callee(node) in SPAWNERS and node.args:
            if _names_git(node.args[0]):
                lines.append(node.lineno)
        elif isinstance(node, ast.Assign) and _is_git(node.value):
            lines.append(node.lineno)
    return lines


def test_only_the_wrapper_starts_git() -> None:
    sources = [*sorted(PACKAGE.rglob("*.py")), *sorted(ACTION.rglob("*.py"))]  # the GitHub Action's too
    found = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sources
        if path != WRAPPER and (hits := git_spawns(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"git started outside fugu_cli/tools/gitrun.py (use gitrun.git): {found}"
    assert git_spawns(WRAPPER.read_text(encoding="utf-8"))  # the scan does see the wrapper's own git


@pytest.mark.parametrize(
    "source",
    [
        # the repo map's call that ran a clone's fsmonitor (issue 22), verbatim
        'out = subprocess.run(\n    ["git", "ls-files", "-co", "--exclude-standard", "-z"],\n    cwd=root,\n'
        "    capture_output=True,\n    timeout=20,\n    check=True,\n).stdout\n",
        # eval's and the demo's
        'subprocess.run(["git", *_GIT_IDENTITY, *args], cwd=root, check=True, capture_output=True)\n',
        'diff = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True).stdout\n',
        # other spellings
        "argv = ('/usr/bin/git', 'status')\nPopen(argv)\n",
        "os.system('git status --short')\n",
        "subprocess.check_output(f'git log -n {n}', shell=True)\n",
        "GIT = 'git'\nsubprocess.run([GIT, 'status'])\n",
        "exe = shutil.which('git')\n",
        "asyncio.create_subprocess_exec('git', 'fetch')\n",
        "sandbox.run(['git', 'status'], cwd=root)\n",
        # the GitHub Action's review diff, verbatim, before it went through the wrapper
        'run = subprocess.run(["git", "diff", f"{base}...{head}"], capture_output=True, text=True)\n',
    ],
)
def test_the_scan_catches_each_way_around(source: str) -> None:
    assert git_spawns(source)


def test_the_scan_leaves_other_commands_and_words_alone() -> None:
    assert (
        git_spawns("subprocess.run(['pgrep', '-P', '1'])\nmsg = f'git {args} failed'\nx = ['gitk']\n") == []
    )


# --- a hostile clone, and every fugu command in it -------------------------------------------------------


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, Path]:
    """A clone whose fsmonitor, hooks and filter write a marker outside it, on the host."""
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = make_repo(tmp_path / "clone")
    git(repo, "config", "core.fsmonitor", f"touch {markers}/fsmonitor; false")
    git(repo, "config", "filter.evil.clean", f"touch {markers}/clean; cat")
    git(repo, "config", "filter.evil.smudge", f"touch {markers}/smudge; cat")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    for hook in ("pre-commit", "post-checkout", "post-index-change", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
        path.chmod(0o755)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b  # changed\n")
    return repo, markers


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


def one_worker(tmp_path: Path, server: LoopbackServer, name: str = "w") -> Path:
    return write_pool(
        tmp_path / "pool.toml", [{"name": name, "model": f"openai/{name}", "api_base": server.base_url}]
    )


def sandbox_off(home: Path) -> None:
    (home / "config.toml").write_text('[sandbox]\nmode = "off"\n')


def reading_model(server: LoopbackServer, name: str) -> None:
    server.script(
        name,
        [
            tool_reply(call("git_status"), call("git_diff"), call("git_log"), call("glob", pattern="*.py")),
            tool_reply(call("grep", pattern="add"), call("read_file", path="calc.py")),
            "Read it all.",
        ],
    )


@pytest.mark.parametrize("sandbox", ["on", "off"])
@pytest.mark.parametrize("mode", ["read-only", "default", "acceptEdits", "bypassPermissions"])
def test_fugu_p_in_every_mode_runs_nothing_of_the_clones(
    clone: tuple[Path, Path], tmp_path: Path, loopback: LoopbackServer, mode: str, sandbox: str
) -> None:
    repo, markers = clone
    if sandbox == "off":
        sandbox_off(Path(os.environ["FUGU_HOME"]))
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": loopback.base_url}]
    )
    reading_model(loopback, "w")
    run = fugu("-p", "summarise this repo", "--pool", str(pool), "--permission-mode", mode, cwd=repo)
    assert run.code == 0, run.stderr
    assert "Repository map" in json.dumps(loopback.requests_for("w")[0].messages)  # the map's listing ran
    assert "calc.py" in json.dumps(loopback.requests_for("w")[-1].messages)  # and every git tool did
    assert fired(markers) == []


def test_the_repl_after_no_to_trust_runs_nothing_of_the_clones(
    clone: tuple[Path, Path], loopback: LoopbackServer
) -> None:
    repo, markers = clone
    sandbox_off(Path(os.environ["FUGU_HOME"]))
    (repo / ".fugu").mkdir()
    (repo / ".fugu" / "config.toml").write_text('permission_mode = "full-auto"\n')
    write_pool(
        repo / ".fugu-pool.toml", [{"name": "alpha", "model": "openai/alpha", "api_base": loopback.base_url}]
    )
    reading_model(loopback, "alpha")
    child = Term(repo)
    child.expect(r"\[y/N\]")
    child.send("n\r")
    child.expect("not trusted")
    child.turn("summarise this repo")
    child.expect("Read it all.", timeout=SLOW)
    child.expect(PROMPT)
    child.quit()
    assert "Repository map" in json.dumps(loopback.requests_for("alpha")[0].messages)
    assert fired(markers) == []


def test_doctor_and_eval_in_the_clone_run_nothing_of_its(
    clone: tuple[Path, Path], tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo, markers = clone
    sandbox_off(Path(os.environ["FUGU_HOME"]))
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": loopback.base_url}]
    )
    assert fugu("doctor", "--pool", str(pool), cwd=repo).code in (0, 1)
    suite = repo / "suite"
    (suite / "task").mkdir(parents=True)
    (suite / "task" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (suite / "task" / ".gitattributes").write_text("* filter=evil\n")
    (suite / "suite.toml").write_text(
        'name = "s"\n[[tasks]]\nid = "t"\nprompt = "fix add"\ncheck = "true"\nrepo = "task"\n'
    )
    reading_model(loopback, "w")
    run = fugu("eval", "suite", "--worker", "w", "--pool", str(pool), cwd=repo)
    assert run.code == 0, run.stderr
    assert fired(markers) == []


def test_ultra_in_the_clone_runs_nothing_of_its(
    clone: tuple[Path, Path], tmp_path: Path, loopback_factory: Callable[[], LoopbackServer]
) -> None:
    repo, markers = clone
    sandbox_off(Path(os.environ["FUGU_HOME"]))
    server = loopback_factory()
    pool = write_pool(
        tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": server.base_url}]
    )
    server.script(
        "w",
        [
            tool_reply(
                call("git_status"), call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")
            ),
            "STEP-ONE done.",
            tool_reply(call("git_diff")),
            "STEP-TWO done.",
        ],
    )
    plan = write_plan(
        tmp_path / "plan.json",
        [
            {"worker": "w", "subtask": "Fix add().", "access": []},
            {"worker": "w", "subtask": "Review.", "access": [0]},
        ],
    )
    run = fugu(
        "-p", "fix add", "--plan", str(plan), "--pool", str(pool), "--permission-mode", "full-auto", cwd=repo
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert "a + b" in (repo / "calc.py").read_text()  # the worktrees, the diff and its landing all ran
    assert fired(markers) == []
