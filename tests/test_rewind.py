"""Rewind to any edit, in process: a real git repo, the real store and tools, scripted words. A checkpoint
is taken after every call that may change the tree; going back to the second of three edits restores exactly
that tree (untracked files included) and, when asked, the conversation as the worker saw it then, which a
resumed session continues from."""

from __future__ import annotations

from pathlib import Path

import pytest

from fugu_cli.app import RunOptions, build_session
from fugu_cli.errors import UsageError
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.types import Message
from tests.helpers import BUGGY, FIXED, call, git, make_repo, tool_reply, write_pool


def _session(repo: Path, pool: Path, script: ScriptedLLM, resume: str | None = None) -> Session:
    opts = RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto", resume=resume)
    return build_session(opts, llm=script)


def test_rewind_to_the_second_of_three_edits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "mine.txt").write_text("the user's own untracked file\n")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    script = ScriptedLLM(
        [
            tool_reply(call("write_file", path="notes.txt", content="first\n")),
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(
                call("write_file", path="notes.txt", content="third\n"), call("shell", command="rm mine.txt")
            ),
            "Three edits.",
            "Back at the second edit.",
        ]
    )
    session = _session(repo, pool, script)
    assert session.run_turn("make three edits").status == "success"
    assert not (repo / "mine.txt").exists() and (repo / "notes.txt").read_text() == "third\n"

    points = session.rewind_points()
    assert [(p.seq, p.kind, p.tool) for p in points] == [
        (1, "turn", ""),
        (2, "edit", "write_file"),
        (3, "edit", "edit_file"),
        (4, "edit", "write_file"),
        (5, "edit", "shell"),
    ]
    second = points[2]
    restored = session.rewind(second.seq, code=True, conversation=True)
    assert sorted(restored) == ["mine.txt", "notes.txt"]
    assert (repo / "calc.py").read_text() == FIXED  # the second edit stays
    assert (repo / "notes.txt").read_text() == "first\n"  # the third is undone
    assert (repo / "mine.txt").read_text() == "the user's own untracked file\n"
    assert git(repo, "status", "--porcelain").split() == ["M", "calc.py", "??", "mine.txt", "??", "notes.txt"]

    def shape(messages: list[Message] | tuple[Message, ...]) -> list[tuple[str, tuple[str, ...]]]:
        return [(m.role, tuple(c.name for c in m.tool_calls)) for m in messages]

    expected = [
        ("system", ()),
        ("user", ()),
        ("assistant", ("write_file",)),
        ("tool", ()),
        ("assistant", ("edit_file",)),
        ("tool", ()),
    ]
    assert shape(session.messages) == expected
    session.run_turn("and now?")
    sent = script.calls[-1].messages
    assert shape([m for m in sent if m.role != "system" or m is sent[0]]) == [*expected, ("user", ())]
    assert "third" not in str(sent)

    # a resumed session continues from the rewound conversation, plus the turn after it
    again = _session(repo, pool, ScriptedLLM(), resume=session.id)
    assert shape(again.messages) == [*expected, ("user", ()), ("assistant", ())]
    assert len(again.rewind_points()) == 5
    with pytest.raises(UsageError, match="no checkpoint 9"):
        again.rewind(9)


def test_rewinding_the_code_only_keeps_the_conversation(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    script = ScriptedLLM(
        [tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")), "Fixed."]
    )
    session = _session(repo, pool, script)
    session.run_turn("fix add")
    before = list(session.messages)
    assert session.rewind(1, code=True, conversation=False) == ["calc.py"]
    assert (repo / "calc.py").read_text() == BUGGY and session.messages == before


def test_fork_session_starts_a_new_session_from_a_resumed_ones_point(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    first = _session(repo, pool, ScriptedLLM(["Hello."]))
    first.run_turn("say hello")
    opts = RunOptions(
        cwd=repo, pool=str(pool), permission_mode="full-auto", resume=first.id, fork_session=True
    )
    script = ScriptedLLM(["Forked."])
    fork = build_session(opts, llm=script)
    assert fork.id != first.id and fork.messages == first.messages
    fork.run_turn("go on in the fork")
    assert [m.content for m in script.calls[0].messages if m.role == "user"] == [
        "say hello",
        "go on in the fork",
    ]
    original = _session(repo, pool, ScriptedLLM(), resume=first.id)
    assert original.messages == first.messages  # the original is untouched
    rows = {r.id: r for r in fork.recent_sessions()}
    assert rows[fork.id].title.startswith(f"fork of {first.id[:8]}")
