"""The input line through prompt-toolkit's pipe input: multi-line keys, Ctrl-C, completion, history."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput

from fugu_cli.ui.prompt import HomeHistory, ReplCompleter, expand_mentions, make_session


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as inp:
        yield inp


def completer(root: Path) -> ReplCompleter:
    commands = [("help", "this list"), ("worker", "pick"), ("undo", "restore")]
    return ReplCompleter(
        lambda: commands, lambda c: ["alpha", "beta", "auto"] if c == "worker" else [], lambda: root
    )


def read(pipe: PipeInput, keys: str, tmp_path: Path) -> str:
    session = make_session(
        lambda: "> ", completer(tmp_path), InMemoryHistory(), input=pipe, output=DummyOutput()
    )
    pipe.send_text(keys)
    return session.prompt()


def test_enter_sends_and_newline_keys_continue(pipe: PipeInput, tmp_path: Path) -> None:
    # Alt-Enter, Ctrl-J and a trailing backslash each add a line; Enter sends
    assert read(pipe, "one\x1b\rtwo\nthree\\\rfour\r", tmp_path) == "one\ntwo\nthree\nfour"


def test_a_backslash_inside_the_line_is_kept(pipe: PipeInput, tmp_path: Path) -> None:
    assert read(pipe, "a\\b\r", tmp_path) == "a\\b"


def test_ctrl_c_clears_a_line_and_interrupts_on_an_empty_one(pipe: PipeInput, tmp_path: Path) -> None:
    assert read(pipe, "half typed\x03fresh\r", tmp_path) == "fresh"
    with pytest.raises(KeyboardInterrupt):
        read(pipe, "\x03", tmp_path)


def test_ctrl_d_on_an_empty_line_ends_input(pipe: PipeInput, tmp_path: Path) -> None:
    with pytest.raises(EOFError):
        read(pipe, "\x04", tmp_path)


def test_history_is_a_file_that_survives_a_new_session(tmp_path: Path) -> None:
    path = tmp_path / "home" / "history"
    first = HomeHistory(lambda: path)
    first.store_string("fix the tests")
    first.store_string("line one\nline two")
    assert path.is_file()
    again = HomeHistory(lambda: path)
    assert list(again.load_history_strings()) == ["line one\nline two", "fix the tests"]


def completions(root: Path, text: str) -> list[str]:
    found = completer(root).get_completions(Document(text), CompleteEvent(completion_requested=True))
    return [text[: len(text) + c.start_position] + c.text for c in found]


def test_completes_commands_their_arguments_and_file_mentions(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "calc.py").write_text("x = 1\n")
    (tmp_path / "setup.py").write_text("")
    (tmp_path / ".git").mkdir()
    assert completions(tmp_path, "/w") == ["/worker"]
    assert completions(tmp_path, "/") == ["/help", "/worker", "/undo"]
    assert completions(tmp_path, "/worker b") == ["/worker beta"]
    assert completions(tmp_path, "look at @s") == ["look at @setup.py", "look at @src/"]
    assert completions(tmp_path, "look at @src/c") == ["look at @src/calc.py"]
    assert completions(tmp_path, "look at @.g") == []  # .git is never offered
    assert completions(tmp_path, "plain words") == []


def test_mentions_attach_file_content(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "secret").mkdir()
    outside = tmp_path.parent / "outside.txt"
    outside.write_text("nope")
    text, attached = expand_mentions("fix @calc.py, see @nothing and @../outside.txt and @secret", tmp_path)
    assert attached == ["calc.py"]
    assert text.startswith("fix @calc.py, see @nothing")
    assert '<file path="calc.py">\ndef add(a, b):\n    return a - b\n\n</file>' in text
    assert "nope" not in text
    assert expand_mentions("no mentions here: a@b.c", tmp_path) == ("no mentions here: a@b.c", [])
