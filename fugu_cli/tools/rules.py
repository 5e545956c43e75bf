"""What a shell command would run, for allow/deny rules: every simple command inside it, wrappers unwrapped.

`analyze` parses with bashlex (a bash grammar, not a tokenizer): compound commands, pipelines, functions,
command and process substitution, `sh -c` / `eval` / `trap` strings, and wrappers (`wrappers.py`: `env`,
`xargs`, `unshare`, `find -exec`, ...) all yield their inner commands. What it cannot see through (a command
name built at run time, a shell reading stdin or a process substitution, code bash takes from elsewhere:
aliases, `BASH_ENV`, arithmetic on a variable's value, `evaluators.py`; syntax bashlex lacks) is an opaque
part, which only an exact rule or the bare `shell` rule allows. Imports bashlex lazily; runs nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from fugu_cli.tools import Part
from fugu_cli.tools.evaluators import BUILTINS, builtin, code_var, parameter_evaluates, shell
from fugu_cli.tools.wrappers import WRAPPERS, Runs, unwrap

_TWO_WORD = frozenset(
    "git npm pnpm yarn pip pip3 uv cargo make go poetry docker kubectl npx bun dotnet gh hatch pdm conda "
    "brew apt apt-get".split()
)
_SHELLS = frozenset("sh bash zsh dash ksh mksh ash busybox rbash yash posh".split())
_FOREIGN_SHELLS = frozenset("csh tcsh fish nu elvish xonsh".split())  # not bash's grammar: opaque
_MAX_DEPTH = 6
_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_STATIC_NAME = re.compile(r"[A-Za-z0-9_./+:@%-][A-Za-z0-9_./+:@%=,-]*")


def analyze(command: str) -> list[Part]:
    """The permission parts of `command`: one per simple command it would run, in order, no duplicates."""
    if not command.strip():
        return [Part("shell")]
    parts = list(dict.fromkeys(_script(command, 0)))
    return parts or [Part("shell")]


def prefix_of(words: list[str]) -> str:
    """`shell:git status`, `shell:pytest`: the command's name, plus its subcommand for tools like git."""
    head = os.path.basename(words[0])
    if head in _TWO_WORD and len(words) > 1 and not words[1].startswith("-"):
        return f"shell:{head} {words[1]}"
    return f"shell:{head}"


def _opaque(text: str) -> Part:
    return Part("shell:" + " ".join(text.split()), opaque=True)


def _script(text: str, depth: int) -> Iterator[Part]:
    """The parts of a whole shell script (a command line, an `sh -c` string)."""
    if depth > _MAX_DEPTH:
        yield _opaque(text)
        return
    stripped, heredocs = _strip_heredocs(text)
    if stripped is None:
        yield _opaque(text)
        return
    stripped = re.sub(r"^\s*time(\s+-p)?\s+", "", stripped)
    try:
        import bashlex

        trees = bashlex.parse(stripped)
    except Exception:  # bashlex lacks [[ ]], case, $(( )), coproc: treat the whole line as unknown
        yield _opaque(text)
        return
    found = sum(_count_heredocs(t) for t in trees)
    if found != heredocs:  # a `<<` we took for a here-document was not one: do not trust the stripping
        yield _opaque(text)
        return
    for tree in trees:
        yield from _node(tree, stripped, depth)


def _strip_heredocs(text: str) -> tuple[str | None, int]:
    """`text` with here-document bodies removed (bashlex cannot parse quoted delimiters), and their count.

    A body whose delimiter is unquoted is expanded by bash: one holding `$(`, a backquote or arithmetic on
    a variable's value makes the whole line opaque (None).
    """
    lines = text.split("\n")
    out: list[str] = []
    pending: list[tuple[str, bool, bool]] = []
    count = 0
    for line in lines:
        if pending:
            delim, dash, quoted = pending[0]
            if (line.lstrip("\t") if dash else line) == delim:
                pending.pop(0)
                out.append(line)
            elif not quoted and _expands_code(line):
                return None, 0
            continue
        out.append(line)
        for m in _HEREDOC.finditer(line):
            pending.append((m.group(3), m.group(1) == "-", bool(m.group(2))))
            count += 1
    if pending:
        return None, 0
    return _HEREDOC.sub(lambda m: f"<<{m.group(1)}{m.group(3)}", "\n".join(out)), count


def _expands_code(line: str) -> bool:
    """Whether a line of an unquoted here-document runs code when bash expands it."""
    if "$(" in line or "`" in line or "$[" in line:
        return True
    return any(parameter_evaluates(m.group(1)) for m in re.finditer(r"\$\{([^}]*)\}", line))


def _count_heredocs(node: Any) -> int:
    n = 1 if getattr(node, "kind", "") == "redirect" and getattr(node, "type", "") in ("<<", "<<-") else 0
    return n + sum(_count_heredocs(c) for c in _children(node))


def _children(node: Any) -> list[Any]:
    kids: list[Any] = []
    for attr in ("parts", "list"):
        kids.extend(getattr(node, attr, None) or [])
    for attr in ("command", "output"):
        child = getattr(node, attr, None)
        if child is not None and hasattr(child, "kind"):
            kids.append(child)
    return kids


def _node(node: Any, text: str, depth: int) -> Iterator[Part]:
    kind = getattr(node, "kind", "")
    if kind == "command":
        yield from _command(node, text, depth)
        return
    if kind == "parameter" and ("$(" in node.value or "`" in node.value or parameter_evaluates(node.value)):
        yield _opaque(text[node.pos[0] : node.pos[1]])  # ${X:-$(cmd)}, ${a[$i]}: code bashlex does not show
    for child in _children(node):
        yield from _node(child, text, depth)


def _command(node: Any, text: str, depth: int) -> Iterator[Part]:
    words: list[Any] = []
    for part in node.parts:
        if part.kind == "assignment":
            yield _assignment(part.word.split("=", 1)[0])
        elif part.kind == "word":
            words.append(part)
        for child in _children(part):  # substitutions inside words, assignments and redirections
            yield from _node(child, text, depth)
    if not words:
        return
    first = words[0]
    if any(c.kind in ("commandsubstitution", "parameter", "processsubstitution") for c in _children(first)):
        yield _opaque(text[node.pos[0] : node.pos[1]])
        return
    values = [_word(w, text) for w in words]
    yield from _words(values, text[node.pos[0] : node.pos[1]], depth)


def _word(node: Any, text: str) -> str:
    """A word with its quotes removed as bash removes them (bashlex strips only the outermost pair, so
    `'a'"b"'c'` would stay `a'"b"'c`); a word holding a substitution keeps bashlex's reading."""
    raw = text[node.pos[0] : node.pos[1]]
    if "$(" in raw or "`" in raw or "${" in raw:
        return str(node.word)
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\":
            out.append(raw[i + 1 : i + 2] if raw[i + 1 : i + 2] != "\n" else "")
            i += 2
        elif c == "'" or raw.startswith("$'", i):
            start = i + (2 if c == "$" else 1)
            end = _closing_quote(raw, start)
            body = raw[start:end]
            out.append(_ansi_c(body) if c == "$" else body)
            i = end + 1
        elif c == '"' or raw.startswith('$"', i):
            i += 2 if c == "$" else 1
            while i < len(raw) and raw[i] != '"':
                if raw[i] == "\\" and raw[i + 1 : i + 2] in ('"', "\\", "$", "`", "\n"):
                    out.append(raw[i + 1] if raw[i + 1] != "\n" else "")
                    i += 2
                else:
                    out.append(raw[i])
                    i += 1
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _closing_quote(raw: str, start: int) -> int:
    """Where the single quote opened before `start` closes (in `$'...'` a backslash escapes one)."""
    ansi = start >= 2 and raw[start - 2] == "$"
    i = start
    while i < len(raw) and raw[i] != "'":
        i += 2 if ansi and raw[i] == "\\" else 1
    return min(i, len(raw))


_ANSI_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_ANSI_ESCAPES |= {"v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(body: str) -> str:
    """The text of bash's `$'...'`: backslash escapes, octal, hex and unicode code points."""

    def one(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "xuU":
            return chr(int(esc[1:], 16)) if len(esc) > 1 else "\\" + esc
        if esc[0] in "01234567":
            return chr(int(esc, 8) & 0xFF)
        if esc[0] == "c":
            return chr(ord(esc[1:2] or "@") & 0x1F)
        return _ANSI_ESCAPES.get(esc, "\\" + esc)

    pattern = r"\\(x[0-9A-Fa-f]{0,2}|u[0-9A-Fa-f]{0,4}|U[0-9A-Fa-f]{0,8}|[0-7]{1,3}|c.?|.)"
    return re.sub(pattern, one, body, flags=re.S)


def _words(words: list[str], text: str, depth: int, placeholder: str | None = None) -> Iterator[Part]:
    """The parts of one simple command given as words (quotes already removed)."""
    if not words:
        return
    name = words[0]
    static = name in ("[", "[[") or _STATIC_NAME.fullmatch(name)
    if not static or (placeholder and placeholder in name):
        yield _opaque(text)  # a name made of globs, braces or xargs' input could be any command
        return
    base = os.path.basename(name)
    if base in _SHELLS:
        yield from _shell(words, text, depth, placeholder)
    elif base in _FOREIGN_SHELLS:
        yield Part(prefix_of(words))
        yield _opaque(text)
    elif base == "eval":
        yield Part("shell:eval")
        yield from _script(" ".join(words[1:]), depth + 1)
    elif base == "find":
        yield from _find(words, text, depth)
    elif base in WRAPPERS:
        yield from _wrapper(words, text, depth, placeholder)
    elif name in BUILTINS:
        yield Part(prefix_of(words))
        yield from _runs(builtin(words), text, depth, placeholder)
    else:
        yield Part(prefix_of(words))


def _shell(words: list[str], text: str, depth: int, placeholder: str | None) -> Iterator[Part]:
    """`sh -c STRING` is analysed as a script; a script file is the shell's own part; stdin is opaque."""
    yield Part(prefix_of(words))
    if os.path.basename(words[0]) == "busybox":
        yield from _words(words[1:], text, depth + 1, placeholder)
        return
    runs = shell(words)
    if placeholder and not runs.scripts and any(placeholder in w for w in words[1:]):
        yield _opaque(text)  # the script file is xargs' or find's input
    yield from _runs(runs, text, depth, placeholder)


def _find(words: list[str], text: str, depth: int) -> Iterator[Part]:
    yield Part("shell:find")
    i = 1
    while i < len(words):
        word = words[i]
        if word == "-delete":
            yield Part("shell:rm")  # find -delete removes files: rules see it as rm
        elif word in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(words) and words[end] not in (";", "+"):
                end += 1
            yield from _words(words[i + 1 : end], text, depth + 1, placeholder="{}")
            i = end
        i += 1


def _wrapper(words: list[str], text: str, depth: int, placeholder: str | None) -> Iterator[Part]:
    yield Part(prefix_of(words))
    for reading in unwrap(words):
        yield from _runs(reading, text, depth, placeholder)


def _runs(runs: Runs, text: str, depth: int, placeholder: str | None) -> Iterator[Part]:
    """The parts of what a wrapper, a builtin or a shell would run besides itself."""
    for name in runs.assigns:
        yield _assignment(name)
    for script in runs.scripts:
        if placeholder and placeholder in script:
            yield _opaque(text)
        elif script.strip():
            yield from _script(script, depth + 1)
    if runs.opaque:
        yield _opaque(text)
    if runs.command:
        yield from _words(list(runs.command), text, depth + 1, runs.placeholder or placeholder)


def _assignment(name: str) -> Part:
    """`NAME=...` before a command (or through env/export): a variable bash runs as code is opaque."""
    return Part("shell:env " + name, opaque=code_var(name))
