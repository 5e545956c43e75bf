"""Custom slash commands: Markdown files in the repository's `.fugu/commands/` (and `.claude/commands/`, as
Claude Code keeps them) and in `commands/` beside the user config. The file's body is the prompt; `$ARGUMENTS`
is replaced by everything after the command, `$1`..`$9` by its words; optional front matter sets
`description`, `argument-hint`, `allowed-tools` and `worker` (or Claude's `model`).

A repository's commands are prompts, which an untrusted repository may add; their `allowed-tools` grant
permissions, so those count only once the folder is trusted. Reads files only; cheap to import.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.config import user_config_path

PROJECT_DIRS = (".fugu/commands", ".claude/commands")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$([1-9])")


@dataclass(frozen=True)
class CustomCommand:
    name: str
    path: Path
    scope: str  # "project" or "user"
    body: str
    description: str = ""
    argument_hint: str = ""
    allowed_tools: tuple[str, ...] = ()
    worker: str | None = None

    @property
    def help(self) -> str:
        what = self.description or _first_line(self.body)
        return f"{what} ({self.scope})"


@dataclass(frozen=True)
class Expanded:
    """A command ready to run: the prompt, and what its front matter asks for the turn."""

    prompt: str
    worker: str | None = None
    allowed_tools: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what was not honoured, for the user


def user_dir() -> Path:
    return user_config_path().parent / "commands"


def load(root: Path) -> dict[str, CustomCommand]:
    """The custom commands of a session in `root`: the user's, then the project's (which win a name)."""
    found: dict[str, CustomCommand] = {}
    for folder, scope in [(user_dir(), "user"), *((root / d, "project") for d in reversed(PROJECT_DIRS))]:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.md")):
            name = ":".join(path.relative_to(folder).with_suffix("").parts)
            if _NAME.match(name) and path.is_file():
                command = _parse(name, path, scope)
                if command is not None:
                    found[name.lower()] = command
    return found


def expand(command: CustomCommand, arguments: str, trusted: bool) -> Expanded:
    """The prompt of `/name arguments`; `trusted`: the repository's folder is trusted."""
    words = _words(arguments)

    def fill(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return arguments
        n = int(m.group(1))
        return words[n - 1] if n <= len(words) else ""

    body = _PLACEHOLDER.sub(fill, command.body)
    if arguments and not _PLACEHOLDER.search(command.body):
        body = f"{body.rstrip()}\n\nARGUMENTS: {arguments}"
    notes: list[str] = []
    allowed = command.allowed_tools
    if allowed and command.scope == "project" and not trusted:
        notes.append(
            f"/{command.name}: its allowed-tools ({', '.join(allowed)}) were not granted: this folder is "
            "not trusted (--trust-project, or answer yes when the REPL asks)"
        )
        allowed = ()
    return Expanded(body.strip(), command.worker, allowed, tuple(notes))


def _parse(name: str, path: Path, scope: str) -> CustomCommand | None:
    try:
        text = path.read_text(encoding="utf-8-sig", errors="replace")
    except OSError:
        return None
    meta, body = front_matter(text)
    tools = meta.get("allowed-tools", "")
    return CustomCommand(
        name=name,
        path=path,
        scope=scope,
        body=body,
        description=meta.get("description", ""),
        argument_hint=meta.get("argument-hint", ""),
        allowed_tools=tuple(t for t in split_tools(tools) if t),
        worker=meta.get("worker") or meta.get("model") or None,
    )


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """`---` key: value lines `---` at the top (a YAML subset: scalars and [lists]), and the rest."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        return {}, text
    meta: dict[str, str] = {}
    last = None
    for line in lines[1:end]:
        key, sep, value = line.partition(":")
        if line.startswith((" ", "\t")) and last is not None and line.strip():  # a folded value goes on
            meta[last] = f"{meta[last]} {line.strip()}".strip()
        elif sep and key.strip() and not key.startswith("#"):
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            elif value in (">", "|", ">-", "|-"):  # a block scalar: its lines follow
                value = ""
            last = key.strip().lower()
            meta[last] = value.strip().strip("\"'")
    return meta, "\n".join(lines[end + 1 :])


def split_tools(value: str) -> list[str]:
    """`Bash(git add:*), Bash(git status:*), Edit` → each rule (commas inside parentheses kept)."""
    out, depth, current = [], 0, ""
    for ch in value:
        if ch == "," and depth == 0:
            out.append(current.strip().strip("\"'"))
            current = ""
            continue
        depth += (ch == "(") - (ch == ")")
        current += ch
    out.append(current.strip().strip("\"'"))
    return out


def _words(arguments: str) -> list[str]:
    try:
        return shlex.split(arguments)
    except ValueError:
        return arguments.split()


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= 60 else line[:57] + "..."
