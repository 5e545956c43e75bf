"""Custom slash commands from `.fugu/commands/*.md` and the user's folder: arguments substituted, front matter
honoured (its allowed-tools only in a trusted folder), shown in /help and completion, run in the REPL (a real
pty) and by `fugu -p "/fix-issue 12"`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fugu_cli import custom_commands
from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.ui.test_repl_pty import PROMPT, SLOW, Term

FIX_ISSUE = """---
description: Fix an issue by number
argument-hint: NUMBER
allowed-tools: Bash(python3:*), Edit
worker: beta
---
Fix issue #$ARGUMENTS. Look up $1 in the tracker, then run `python3 test_calc.py`.
"""


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


@pytest.fixture
def repo(tmp_path: Path, server: LoopbackServer) -> Path:
    root = make_repo(tmp_path / "repo")
    (root / ".fugu" / "commands").mkdir(parents=True)
    (root / ".fugu" / "commands" / "fix-issue.md").write_text(FIX_ISSUE)
    workers = [
        {"name": "alpha", "model": "openai/alpha", "api_base": server.base_url, "priority": 2},
        {"name": "beta", "model": "openai/beta", "api_base": server.base_url, "priority": 1},
    ]
    write_pool(root / ".fugu-pool.toml", workers)
    (root / ".git" / "info" / "exclude").write_text(".fugu-pool.toml\n")
    return root


def test_arguments_front_matter_and_scopes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    user = custom_commands.user_dir()
    user.mkdir(parents=True)
    (user / "explain.md").write_text("Explain $1 to a newcomer.\n")
    (user / "fix-issue.md").write_text("the user's own fix-issue, shadowed by the project's\n")
    (repo / ".fugu" / "commands" / "git").mkdir(parents=True)
    (repo / ".fugu" / "commands" / "fix-issue.md").write_text(FIX_ISSUE)
    (repo / ".fugu" / "commands" / "git" / "tidy.md").write_text("Tidy the branch.")
    found = custom_commands.load(repo)
    assert sorted(found) == ["explain", "fix-issue", "git:tidy"]
    fix = found["fix-issue"]
    assert (fix.scope, fix.description, fix.worker) == ("project", "Fix an issue by number", "beta")
    assert fix.allowed_tools == ("Bash(python3:*)", "Edit")

    done = custom_commands.expand(fix, "12 urgent", trusted=True)
    assert done.prompt == "Fix issue #12 urgent. Look up 12 in the tracker, then run `python3 test_calc.py`."
    assert done.allowed_tools == ("Bash(python3:*)", "Edit") and done.notes == ()
    untrusted = custom_commands.expand(fix, "12", trusted=False)
    assert untrusted.allowed_tools == () and "not granted: this folder is not trusted" in untrusted.notes[0]
    assert (
        custom_commands.expand(found["explain"], "$ARGUMENTS x", True).prompt
        == "Explain $ARGUMENTS to a newcomer."
    )
    assert (
        custom_commands.expand(found["git:tidy"], "fast", True).prompt
        == "Tidy the branch.\n\nARGUMENTS: fast"
    )


def test_print_mode_runs_a_custom_command(repo: Path, server: LoopbackServer) -> None:
    server.script(
        "beta", [tool_reply(call("shell", command="python3 test_calc.py")), "Issue 12: add() is wrong."]
    )
    run = fugu("-p", "/fix-issue 12", "--pool", ".fugu-pool.toml", "--trust-project", cwd=repo)
    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "Issue 12: add() is wrong."
    assert server.requests_for("alpha") == []  # the front matter's worker took every step
    sent = server.requests_for("beta")
    assert sent[0].messages[-1]["content"].startswith("Fix issue #12. Look up 12 in the tracker")
    ran = [m["content"] for m in sent[-1].messages if m["role"] == "tool"]
    assert "add(2, 3) should be 5" in ran[0]  # allowed by the command's allowed-tools, with nobody to ask

    server.script("beta", [tool_reply(call("shell", command="python3 test_calc.py")), "Refused."])
    run = fugu("-p", "/fix-issue 13", "--pool", ".fugu-pool.toml", cwd=repo)  # the folder is not trusted
    assert run.code == 0, run.stderr
    assert "/fix-issue: its allowed-tools (Bash(python3:*), Edit) were not granted" in run.stderr
    refused = [m["content"] for m in server.requests_for("beta")[-1].messages if m["role"] == "tool"]
    assert refused[-1].startswith("Permission denied")


def test_the_repl_lists_completes_and_runs_a_custom_command(repo: Path, server: LoopbackServer) -> None:
    server.script("beta", ["Looked at issue 12."])
    child = Term(repo, "--trust-project")
    child.turn("/help")
    child.expect(r"/fix-issue\s+Fix an issue by number \(project\)", timeout=SLOW)
    child.expect(PROMPT)
    child.send("/fix-i")
    child.expect("Fix an issue by number")  # the completion menu shows it while typing
    child.send("ssue 12\r")
    child.expect(r"↳ beta", timeout=SLOW)
    child.expect("Looked at issue 12.")
    child.finished()
    assert server.requests_for("beta")[0].messages[-1]["content"].startswith("Fix issue #12.")
    child.send("/fix-isue 1\r")
    child.expect(r"unknown command /fix-isue; did you mean /fix-issue\?")
    child.expect(PROMPT)
    child.quit()
