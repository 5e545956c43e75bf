"""Custom agents in Claude Code's format: what is read from where, and when a repository's are left out."""

from __future__ import annotations

from pathlib import Path

from fugu_cli import custom_agents

REVIEWER = """---
name: reviewer
description: >
  Reviews a diff
  for bugs and style.
tools: Read, Grep, Bash(git diff:*), WebFetch, todo_write
model: sonnet
---
Review the change. Report problems by file and line.
"""


def test_agents_are_read_in_claudes_format_and_the_repository_wins_a_name_once_trusted(
    tmp_path: Path,
) -> None:
    root = tmp_path / "repo"
    (root / ".claude" / "agents").mkdir(parents=True)
    (root / ".claude" / "agents" / "reviewer.md").write_text(REVIEWER)
    (root / ".fugu" / "agents").mkdir(parents=True)
    (root / ".fugu" / "agents" / "reviewer.md").write_text(
        "---\ndescription: fugu's own reviewer\n---\nBe brief.\n"
    )
    (root / ".claude" / "agents" / "bad name!.md").write_text("---\nname: bad name!\n---\nx\n")
    custom_agents.user_dir().mkdir(parents=True)
    (custom_agents.user_dir() / "scribe.md").write_text("Writes the changelog.\n\nKeep it short.\n")

    untrusted = custom_agents.load(root, trusted=False)
    assert list(untrusted) == ["general-purpose", "scribe"]
    scribe = untrusted["scribe"]
    assert (scribe.description, scribe.scope, scribe.tools, scribe.routed) == (
        "Writes the changelog.",
        "user",
        None,
        True,
    )
    assert custom_agents.untrusted(root) == ["reviewer"]

    trusted = custom_agents.load(root, trusted=True)
    assert list(trusted) == ["general-purpose", "scribe", "reviewer"]
    assert trusted["reviewer"].description == "fugu's own reviewer"  # .fugu/agents wins the name
    (root / ".fugu" / "agents" / "reviewer.md").unlink()
    claude = custom_agents.load(root, trusted=True)["reviewer"]
    assert claude.description == "Reviews a diff for bugs and style."
    assert claude.tools == (
        "read_file",
        "grep",
        "shell",
        "shell_output",
        "shell_kill",
        "web_fetch",
        "todo_write",
    )
    assert claude.unknown_tools == ()
    assert (claude.model, claude.routed, claude.scope) == ("sonnet", False, "project")
    assert claude.instructions == "Review the change. Report problems by file and line."
