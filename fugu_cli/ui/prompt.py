"""The input line: a prompt-toolkit session with history in FUGU_HOME, multi-line keys, completion, @files.

Enter sends; Alt-Enter, Ctrl-J or a trailing backslash add a line; Ctrl-R searches history; Ctrl-C clears a
non-empty line and, on an empty one, raises KeyboardInterrupt for the REPL to count. Imports nothing heavy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from prompt_toolkit import PromptSession
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import is_searching
from prompt_toolkit.history import FileHistory, History, ThreadedHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import Output

MENTION = re.compile(r"(?<!\S)@(\S+)")
MAX_ATTACH = 100_000
ATTACHMENTS = "\n\nFiles the user attached:\n"  # what separates the typed text from attached files
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


class HomeHistory(History):
    """FileHistory at FUGU_HOME/history, whose path is resolved on first use (off the startup path)."""

    def __init__(self, path: Callable[[], Path]) -> None:
        super().__init__()
        self._path = path
        self._file: FileHistory | None = None

    def _history(self) -> FileHistory:
        if self._file is None:
            path = self._path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = FileHistory(str(path))
        return self._file

    def load_history_strings(self) -> Iterable[str]:
        return self._history().load_history_strings()

    def store_string(self, string: str) -> None:
        self._history().store_string(string)


def history_path() -> Path:
    from fugu_cli.config import fugu_home

    return fugu_home() / "history"


class ReplCompleter(Completer):
    """`/commands` (and their arguments) at the start of the line, `@path` mentions anywhere."""

    def __init__(
        self,
        commands: Callable[[], Sequence[tuple[str, str]]],
        arguments: Callable[[str], Sequence[str]],
        root: Callable[[], Path],
    ) -> None:
        self.commands = commands
        self.arguments = arguments
        self.root = root

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        before = document.text_before_cursor
        if before.startswith("/") and "\n" not in before:
            head, space, arg = before[1:].partition(" ")
            if not space:
                for name, help_text in self.commands():
                    if name.startswith(head.lower()):
                        yield Completion(name, start_position=-len(head), display_meta=help_text)
                return
            if " " not in arg:
                for value in self.arguments(head.lower()):
                    if value.startswith(arg):
                        yield Completion(value, start_position=-len(arg))
                return
        word = before.split()[-1] if before.strip() and not before[-1].isspace() else ""
        if word.startswith("@"):
            yield from self._paths(word[1:])

    def _paths(self, partial: str) -> Iterator[Completion]:
        folder, _, stem = partial.rpartition("/")
        base = self.root() / folder if folder else self.root()
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            if not entry.name.startswith(stem) or entry.name in SKIP_DIRS:
                continue
            if entry.name.startswith(".") and not stem.startswith("."):
                continue
            rel = f"{folder}/{entry.name}" if folder else entry.name
            is_dir = entry.is_dir()
            yield Completion(rel + ("/" if is_dir else ""), start_position=-len(partial), display=entry.name)


def key_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    @bindings.add("c-j")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    @bindings.add("enter", filter=~is_searching)
    def _enter(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.document.text_before_cursor.endswith("\\") and buffer.document.is_cursor_at_the_end:
            buffer.delete_before_cursor(1)
            buffer.insert_text("\n")
            return
        if buffer.complete_state is not None and buffer.complete_state.current_completion is not None:
            buffer.complete_state = None
            return
        buffer.validate_and_handle()

    @bindings.add("c-c", filter=~is_searching)
    def _cancel(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.text:
            buffer.reset()
        else:
            event.app.exit(exception=KeyboardInterrupt())

    return bindings


def make_session(
    message: Callable[[], str],
    completer: Completer,
    history: History | None = None,
    *,
    input: Input | None = None,
    output: Output | None = None,
) -> PromptSession[str]:
    return PromptSession(
        input=input,
        output=output,
        message=message,
        history=ThreadedHistory(history or HomeHistory(history_path)),
        completer=completer,
        complete_while_typing=True,
        key_bindings=key_bindings(),
        multiline=False,
        prompt_continuation=lambda width, line, wrap: "… ".rjust(width),
    )


def _is_image(path: Path) -> bool:
    from fugu_cli.tools.images import looks_like_image

    return looks_like_image(path)


def expand_mentions(text: str, root: Path) -> tuple[str, list[str]]:
    """Append the content of every `@path` that names a text file in the repository; return it and the
    paths (an image goes with the message as an image: `tools.images.prompt_images`)."""
    attached: list[str] = []
    blocks: list[str] = []
    top = root.resolve()
    for match in MENTION.finditer(text):
        rel = match.group(1).rstrip(".,;:!?)")
        path = (top / rel).resolve()
        if rel in attached or not path.is_file() or not path.is_relative_to(top) or _is_image(path):
            continue
        data = path.read_bytes()[:MAX_ATTACH].decode("utf-8", errors="replace")
        cut = "\n[… cut at 100 kB]" if path.stat().st_size > MAX_ATTACH else ""
        blocks.append(f'<file path="{rel}">\n{data}{cut}\n</file>')
        attached.append(rel)
    if not blocks:
        return text, []
    return text + ATTACHMENTS + "\n".join(blocks), attached
