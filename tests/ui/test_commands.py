"""Slash commands against a real session (scripted LLM, real git repo, real SQLite), rendered to a string."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.ui import commands
from tests.helpers import BUGGY, FIXED, call, git, make_repo, tool_reply, write_pool


class Ctx:
    """The REPL side of the commands' Context: a string console, the session, the controls it recorded."""

    def __init__(self, session: Session) -> None:
        self.out = io.StringIO()
        self.console = Console(file=self.out, width=100, force_terminal=False)
        self.session = session
        self.switched: list[str | None] = []
        self.prompts: list[tuple[str, str | None, tuple[str, ...]]] = []
        self.stopped = False

    def switch_session(self, resume: str | None) -> None:
        self.switched.append(resume)

    def stop(self) -> None:
        self.stopped = True

    def run_prompt(self, text: str, worker: str | None = None, allow: Sequence[str] = ()) -> None:
        self.prompts.append((text, worker, tuple(allow)))

    def run(self, line: str) -> str:
        start = self.out.tell()
        assert commands.dispatch(self, line)
        return self.out.getvalue()[start:]


EDIT = tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b"))


def aged_repo(root: Path) -> Path:
    """make_repo, with its files and index 10 s old.

    fugu_cli/tools/git.py snapshots through a copy of the index that loses the index's mtime, which defeats
    git's racy-clean check: an edit of the same size in the same second as the last index write, snapshotted
    a second later, is missed. Reported; until it is fixed these tests keep their edits out of that second.
    """
    make_repo(root)
    old = time.time() - 10
    for name in ("calc.py", "test_calc.py"):
        os.utime(root / name, (old, old))
    git(root, "add", "-A")
    return root


def make(tmp_path: Path, llm: ScriptedLLM, **kw: object) -> Session:
    repo = tmp_path / "repo"
    if not repo.exists():
        aged_repo(repo)
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "alpha", "model": "openai/alpha", "price_in": 1.0, "price_out": 2.0, "priority": 2},
            {"name": "beta", "model": "openai/beta", "price_in": 0.5, "price_out": 1.0},
        ],
    )
    opts = RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto", **kw)  # type: ignore[arg-type]
    return build_session(opts, llm=llm)


@pytest.fixture
def ctx(tmp_path: Path) -> Ctx:
    llm = ScriptedLLM({"alpha": [EDIT, "Fixed add."], "beta": ["beta here."]})
    session = make(tmp_path, llm)
    session.run_turn("fix the failing test")
    return Ctx(session)


def test_trace_says_who_did_what(ctx: Ctx) -> None:
    out = ctx.run("/trace")
    lines = out.splitlines()
    cost = ctx.session.ledger.steps()[0].usage.cost_usd
    assert lines[0].startswith("turn 1 step 1 alpha (prior, p=") and lines[0].endswith(f"· ok · ${cost:.4f}")
    assert "    alpha: edit calc.py" in lines
    assert lines[2].startswith("turn 1 step 2 alpha (prior")


def test_cost_sums_the_ledger_per_worker(ctx: Ctx) -> None:
    steps = ctx.session.ledger.steps()
    total = sum(s.usage.cost_usd for s in steps)
    out = ctx.run("/cost")
    assert total > 0
    alpha = next(line for line in out.splitlines() if line.startswith("alpha"))
    assert alpha.split()[1] == "2"
    assert f"${total:.4f}" in out.splitlines()[-1] and out.splitlines()[-1].startswith("total")


def test_pool_lists_workers_prices_and_the_routers_last_view(ctx: Ctx) -> None:
    out = ctx.run("/pool")
    alpha = next(line for line in out.splitlines() if line.startswith("alpha"))
    p = ctx.session.ledger.steps()[-1].scores["alpha"]
    assert "openai/alpha" in alpha and "$1/$2" in alpha and f"{p:.2f}" in alpha
    assert "router: prior" in out


def test_diff_then_undo_restores_the_file_then_nothing_to_undo(ctx: Ctx) -> None:
    root = ctx.session.root
    assert (root / "calc.py").read_text() == FIXED
    out = ctx.run("/diff")
    assert "-    return a - b" in out and "+    return a + b" in out
    (root / "notes.txt").write_text("mine, untracked, made after the turn\n")
    out = ctx.run("/undo")
    assert "calc.py" in out
    assert (root / "calc.py").read_text() == BUGGY
    assert not (root / "notes.txt").exists()  # exactly the state before the turn's first edit
    assert git(root, "status", "--porcelain") == ""
    assert "nothing to undo" in ctx.run("/undo")
    assert "No uncommitted changes" in ctx.run("/diff")


def test_undo_skips_a_later_turn_that_changed_nothing(ctx: Ctx) -> None:
    llm = ctx.session.deps.agent.llm
    assert isinstance(llm, ScriptedLLM)
    llm.add(tool_reply(call("shell", command="python3 test_calc.py")), "It passes.", worker="alpha")
    assert ctx.session.run_turn("run the test").status == "success"
    assert len(ctx.session.checkpoints) == 2  # the command might have changed files, so it got one too
    assert "calc.py" in ctx.run("/undo")
    assert (ctx.session.root / "calc.py").read_text() == BUGGY


def test_undo_works_after_resuming(ctx: Ctx, tmp_path: Path) -> None:
    again = make(tmp_path, ScriptedLLM([]), resume=ctx.session.id)
    assert "calc.py" in Ctx(again).run("/undo")
    assert (again.config.root / "calc.py").read_text() == BUGGY
    third = make(tmp_path, ScriptedLLM([]), resume=ctx.session.id)
    assert "nothing to undo" in Ctx(third).run("/undo")  # the checkpoint was used up


def test_commit_commits_with_the_last_task_as_message(ctx: Ctx) -> None:
    root = ctx.session.root
    out = ctx.run("/commit")
    assert "Committed" in out
    assert git(root, "log", "-1", "--format=%s").strip() == "fix the failing test"
    assert git(root, "status", "--porcelain") == ""
    assert "Nothing to commit" in ctx.run("/commit again")


def test_worker_is_sticky_until_auto(ctx: Ctx) -> None:
    assert "every step goes to beta" in ctx.run("/worker beta")
    assert ctx.session.settings().worker == "beta"
    result = ctx.session.run_turn("say hi")
    assert list(result.workers) == ["beta"]
    assert ctx.session.ledger.steps()[-1].source == "override"
    assert "did you mean beta?" in ctx.run("/worker betta")
    assert ctx.session.settings().worker == "beta"
    assert "worker: beta" in ctx.run("/worker")
    ctx.run("/worker auto")
    assert ctx.session.settings().worker is None


def test_unknown_commands_suggest_the_nearest(ctx: Ctx) -> None:
    assert "unknown command /wrker; did you mean /worker?" in ctx.run("/wrker beta")
    assert "did you mean /undo?" in ctx.run("/udno")
    assert ctx.run("/nosuch").strip() == "unknown command /nosuch (/help lists them)"
    assert "did you mean /trace?" in ctx.run("/tr")
    assert not commands.dispatch(ctx, "/usr/bin is full, why?")  # a path is a task, not a command
    assert not commands.dispatch(ctx, "fix it")
    assert commands.parse("/Worker\tbeta \n") == ("worker", "beta")
    assert commands.parse("/commit fix add\n\nlonger body") == ("commit", "fix add\n\nlonger body")
    assert commands.parse("/") is None


def test_session_commands_and_help(ctx: Ctx) -> None:
    out = ctx.run("/sessions")
    assert f"* {ctx.session.id}" in out and "fix the failing test" in out
    ctx.run("/clear")
    ctx.run("/resume 2026")
    assert "usage: /resume ID" in ctx.run("/resume")
    assert ctx.switched == [None, "2026"]
    ctx.run("/exit")
    assert ctx.stopped
    help_text = ctx.run("/help")
    assert all(f"/{name}" in help_text for name in commands.COMMANDS)


def test_other_clis_names_for_commands_are_aliases_a_custom_command_can_take(ctx: Ctx) -> None:
    """/model, /new and /quit (Claude Code's and Codex's names) do what /worker, /clear and /exit do,
    and /help says so; a custom command of the user's with such a name is theirs."""
    assert "every step goes to beta" in ctx.run("/model beta")
    assert ctx.session.settings().worker == "beta"
    ctx.run("/new")
    assert ctx.switched == [None]
    ctx.run("/quit")
    assert ctx.stopped
    assert "also: /model (/worker), /new (/clear), /quit (/exit)" in ctx.run("/help")
    commands_dir = ctx.session.root / ".fugu" / "commands"
    commands_dir.mkdir(parents=True)
    (commands_dir / "model.md").write_text("Describe the data model of this repository.\n")
    ctx.run("/model")
    assert ctx.prompts and ctx.prompts[-1][0].startswith("Describe the data model")


def test_ultra_on_renders_the_workflow_and_memory_shows_what_it_learned(tmp_path: Path) -> None:
    from fugu_cli.ui.render import Renderer

    plan = '{"steps": [{"worker": "beta", "subtask": "Run the test.", "access": []}]}'
    llm = ScriptedLLM(
        {
            "alpha": [plan],
            "beta": [tool_reply(call("shell", command="python3 test_calc.py")), "The test fails."],
        }
    )
    ctx = Ctx(make(tmp_path, llm))
    assert "ultra mode is off" in ctx.run("/ultra")
    assert "No memory yet" in ctx.run("/memory")
    assert "ultra mode is on" in ctx.run("/ultra on")
    renderer = Renderer(ctx.console)
    start = ctx.out.tell()
    result = ctx.session.run_turn("does the test pass?", renderer.on_event)
    shown = ctx.out.getvalue()[start:]
    assert result.status == "success"
    assert "◆ workflow 1 (conductor: prompted conductor alpha, 1 step)\n  0. beta: Run the test." in shown
    assert "▸ step 0 · beta started" in shown
    assert "  [0] beta ▸ $ python3 test_calc.py  exit 1" in shown
    assert "✓ step 0 · beta · success" in shown
    assert "The test fails." in shown  # the workflow's answer, printed once
    assert shown.count("The test fails.") == 1
    trace = ctx.run("/trace")
    assert (
        "conductor" in trace.split("[wf1.s0]")[0]
    )  # the conductor's planning step, then the step's own ledger
    assert "turn 1 step 1 beta" in trace.split("[wf1.s0]")[1] and "beta: $ python3 test_calc.py" in trace
    cost = ctx.run("/cost").splitlines()
    rows = {line.split()[0]: line.split() for line in cost[1:]}
    assert rows["alpha"][1] == "1" and rows["beta"][1] == "2"  # the conductor's plan, the step's two calls
    assert rows["total"][-1] == f"${result.usage.cost_usd:.4f}"
    memory = ctx.run("/memory")
    assert "workflow 1:" in memory and "python3 test_calc.py" in memory and "[beta]" in memory
    assert "usage: /ultra on|off" in ctx.run("/ultra maybe")
    ctx.run("/ultra off")
    assert not ctx.session.ultra


def test_check_judges_the_next_turns_and_trace_shows_its_attempts(tmp_path: Path) -> None:
    wrong = tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a * b"))
    llm = ScriptedLLM({"alpha": [wrong, "Changed it."], "beta": [EDIT, "Fixed add."]})
    session = make(tmp_path, llm)
    ctx = Ctx(session)
    assert "no check" in ctx.run("/check")
    assert "is not a command here" in ctx.run("/check no-such-checker-xyz")
    assert session.settings().check is None
    said = ctx.run("/check python3 test_calc.py")
    assert "check: `python3 test_calc.py` judges each attempt" in said
    result = session.run_turn("fix add()")  # alpha's change fails the check: set aside, beta's passes
    assert [(a.worker, a.check) for a in result.attempts] == [("alpha", "failed"), ("beta", "passed")]
    assert result.status == "success" and result.result == "Fixed add." and result.num_turns == 4
    assert (tmp_path / "repo" / "calc.py").read_text() == FIXED
    trace = ctx.run("/trace").splitlines()
    steps = [line.split(" (")[0] for line in trace if line.startswith("turn 1 step")]
    assert steps == ["turn 1 step 1 alpha", "turn 1 step 2 alpha", "turn 1 step 3 beta", "turn 1 step 4 beta"]
    assert any(
        line.startswith("turn 1 step 3 beta") and "escalates after alpha failed" in line for line in trace
    )
    lines = [line for line in trace if line.startswith("turn 1 attempt ")]
    assert lines[0].startswith("turn 1 attempt 1: alpha · check failed (exit 1)")
    assert lines[0].endswith("set aside as ")  # the ref follows, folded onto the next line at 100 columns
    assert (result.attempts[0].set_aside or "").startswith("refs/fugu/checkpoints/")
    assert lines[1].startswith("turn 1 attempt 2: beta · check passed (exit 0)")
    ctx.run("/check off")
    assert session.settings().check is None
