"""What a shell command would run, for allow/deny rules: every simple command inside it, wrappers unwrapped.

`analyze` parses with bashlex (a bash grammar, not a tokenizer): compound commands, pipelines, functions,
command and process substitution, `sh -c` / `eval` strings, and wrappers (`env`, `command`, `xargs`, `nice`,
`timeout`, `find -exec`, ...) all yield their inner commands. What it cannot see through (a command name built
at run time, a shell reading commands from stdin, syntax bashlex lacks) is an opaque part, which only an exact
rule or the bare `shell` rule allows. Imports bashlex lazily; runs nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from fugu_cli.tools import Part

_TWO_WORD = frozenset(
    "git npm pnpm yarn pip pip3 uv cargo make go poetry docker kubectl npx bun dotnet gh hatch pdm conda "
    "brew apt apt-get".split()
)
_SHELLS = frozenset("sh bash zsh dash ksh mksh ash busybox".split())
_MAX_DEPTH = 6
# wrapper -> options that take a value (so the word after them is not the wrapped command)
_WRAPPERS: dict[str, frozenset[str]] = {
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-U", "-r", "-t", "-D", "--user", "--group"}),
    "doas": frozenset({"-u", "-C"}),
    "unbuffer": frozenset(),
    "chronic": frozenset(),
    "strace": frozenset({"-e", "-o", "-p", "-s", "-u", "-E", "-P", "-S", "-X", "-b", "-a", "-O", "-I"}),
    "ltrace": frozenset({"-e", "-o", "-p", "-s", "-u", "-n", "-l", "-L", "-a"}),
    "taskset": frozenset(),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "xargs": frozenset(
        {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args"}
        | {"--max-procs", "--max-lines", "--max-chars", "--process-slot-var", "--replace", "--eof"}
    ),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "flock": frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}),
    "watch": frozenset({"-n", "--interval", "-d"}),
}
# how many positional words a wrapper takes before the wrapped command (timeout's DURATION, ...)
_POSITIONAL = {"timeout": 1, "taskset": 1, "flock": 1}
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

    A body whose delimiter is unquoted is expanded by bash: one holding `$(` or a backquote makes the
    whole line opaque (None).
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
            elif not quoted and ("$(" in line or "`" in line):
                return None, 0
            continue
        out.append(line)
        for m in _HEREDOC.finditer(line):
            pending.append((m.group(3), m.group(1) == "-", bool(m.group(2))))
            count += 1
    if pending:
        return None, 0
    return _HEREDOC.sub(lambda m: f"<<{m.group(1)}{m.group(3)}", "\n".join(out)), count


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
    if kind == "parameter" and ("$(" in node.value or "`" in node.value):
        yield _opaque(text[node.pos[0] : node.pos[1]])  # ${X:-$(cmd)}: bashlex does not parse inside
    for child in _children(node):
        yield from _node(child, text, depth)


def _command(node: Any, text: str, depth: int) -> Iterator[Part]:
    words: list[Any] = []
    for part in node.parts:
        if part.kind == "assignment":
            yield Part("shell:env " + part.word.split("=", 1)[0])
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
    yield from _words([w.word for w in words], text[node.pos[0] : node.pos[1]], depth)


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
    elif base == "eval":
        yield Part("shell:eval")
        yield from _script(" ".join(words[1:]), depth + 1)
    elif base == "find":
        yield from _find(words, text, depth)
    elif base in _WRAPPERS:
        yield from _wrapper(base, words, text, depth, placeholder)
    else:
        yield Part(prefix_of(words))


def _shell(words: list[str], text: str, depth: int, placeholder: str | None) -> Iterator[Part]:
    """`sh -c STRING` is analysed as a script; a script file is the shell's own part; stdin is opaque.

    Any option cluster with a `c` makes the next non-option word the script, wherever it stands: reading
    too much text as commands only adds parts, reading too little would hide one.
    """
    yield Part(prefix_of(words))
    rest = words[1:]
    if os.path.basename(words[0]) == "busybox":
        yield from _words(rest, text, depth + 1, placeholder)
        return
    short = [w for w in rest if w.startswith("-") and not w.startswith("--") and len(w) > 1]
    if any("s" in w[1:] for w in short):
        yield _opaque(text)  # -s: commands from stdin
        return
    takes_arg = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}
    skip = False
    seen_c = False
    operands: list[str] = []
    for word in rest:
        if skip:
            skip = False
        elif word in takes_arg or (word[:1] in "-+" and not word.startswith("--") and word[-1:] in "oO"):
            skip = True
            seen_c = seen_c or ("c" in word[1:] and not word.startswith("--"))
        elif word[:1] in "-+" and len(word) > 1:
            seen_c = seen_c or ("c" in word[1:] and not word.startswith("--"))
        else:
            operands.append(word)
    if seen_c and operands:
        if placeholder and placeholder in operands[0]:
            yield _opaque(text)
        else:
            yield from _script(operands[0], depth + 1)
    elif not operands:
        yield _opaque(text)  # no -c string and no file: commands come from stdin


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


def _wrapper(base: str, words: list[str], text: str, depth: int, placeholder: str | None) -> Iterator[Part]:
    yield Part(prefix_of(words))
    takes_value = _WRAPPERS[base]
    positional = _POSITIONAL.get(base, 0)
    rest = words[1:]
    i = 0
    while i < len(rest):
        word = rest[i]
        if base == "env" and "=" in word and not word.startswith("-"):
            yield Part("shell:env " + word.split("=", 1)[0])
        elif base == "env" and (word in ("-S", "--split-string") or word.startswith("--split-string=")):
            script = word.partition("=")[2] or (rest[i + 1] if i + 1 < len(rest) else "")
            yield from _script(script + " " + " ".join(rest[i + 2 :]), depth + 1)
            return
        elif base == "command" and word in ("-v", "-V"):
            return  # only looks the name up
        elif base == "xargs" and (word.startswith(("-I", "--replace")) or word == "-i"):
            if word == "-I":
                placeholder = rest[i + 1] if i + 1 < len(rest) else "{}"
                i += 1
            elif word.startswith("-I"):
                placeholder = word[2:]
            else:
                placeholder = word.partition("=")[2] or "{}"
        elif word == "--":
            i += 1
            break
        elif word.startswith("-") and word != "-":
            if word in takes_value:
                i += 1
        elif positional > 0:
            positional -= 1
        else:
            break
        i += 1
    inner = rest[i:]
    if base == "watch" and inner:
        yield from _script(" ".join(inner), depth + 1)
    elif base == "flock" and inner[:1] == ["-c"]:
        yield from _script(" ".join(inner[1:]), depth + 1)
    elif inner:
        yield from _words(inner, text, depth + 1, placeholder)
