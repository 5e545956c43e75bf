"""Code bash runs that is not a command name: shells' scripts, trap actions, aliases, code-carrying variables,
strings evaluated as arithmetic.

`shell` reads an `sh`/`bash` invocation as bash does; `builtin` reads a builtin that runs or redefines code;
`code_var` and `parameter_evaluates` name the variables and expansions that turn data into code. Each says
what would run (`Runs`): scripts to analyse, a command, or that it is opaque (code no rule can read: stdin,
a process substitution, an alias, a variable's value run as arithmetic). Pure: parses words, runs nothing.
"""

from __future__ import annotations

import re

from fugu_cli.tools.wrappers import Runs

# variables bash or the loader turn into code: startup files, prompts, exported functions, shell options
# (BASHOPTS=expand_aliases), preloaded libraries
CODE_VARS = frozenset(
    "BASH_ENV ENV PROMPT_COMMAND PS0 PS1 PS2 PS3 PS4 BASHOPTS SHELLOPTS LD_PRELOAD LD_AUDIT LD_LIBRARY_PATH "
    "GCONV_PATH".split()
)
_CODE_VAR_IN = re.compile(
    r"(?<![A-Za-z0-9_])(" + "|".join(sorted(CODE_VARS)) + r"|BASH_FUNC_[^=\s]*)(?![A-Za-z0-9_])"
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL_INDEX = re.compile(r"\[(-?[0-9]+|@|\*)\]")
_STATIC_PATH = re.compile(r"[A-Za-z0-9_./+:@%=,~-]+")
# builtins that run a string, define code under a name, or evaluate a variable's value as arithmetic
BUILTINS = frozenset(
    "trap alias shopt hash fc enable mapfile readarray source . declare typeset local export readonly read "
    "printf let compgen test [".split()
)


def code_var(name: str) -> bool:
    """Whether setting `name` makes bash (or the loader) run its value as code."""
    return name in CODE_VARS or name.startswith("BASH_FUNC_")


def parameter_evaluates(value: str) -> bool:
    """Whether `${value}` evaluates text as arithmetic (a subscript or an offset that is not a number) or
    names another variable (`${!x}`): bash runs `$(...)` inside the text it reaches that way."""
    if value.startswith("!") and not value.endswith(("*", "@", "[@]", "[*]")):
        return True
    name = _NAME.match(value.lstrip("#!"))
    if name is None:
        return False
    tail = value.lstrip("#!")[name.end() :]
    literal = _LITERAL_INDEX.match(tail)
    if tail.startswith("[") and not literal:
        return True
    tail = tail[literal.end() :] if literal else tail
    offsets = tail[1:] if tail.startswith(":") and tail[1:2] not in ("-", "=", "?", "+") else ""
    return bool(re.search(r"[^0-9:\s-]", offsets))


def plain_file(word: str) -> bool:
    """A script operand that names a file on disk (not stdin, a descriptor or a process substitution)."""
    return (
        bool(_STATIC_PATH.fullmatch(word))
        and word not in ("-", "--")
        and not word.startswith(("/dev/", "/proc/"))
    )


def shell(words: list[str]) -> Runs:
    """`bash -c STRING` runs STRING; `bash FILE` runs a script file (only the shell's own part); commands
    read from stdin, `/dev/fd`, a process substitution, an interactive shell's startup files or an alias
    are opaque."""
    rest = words[1:]
    flags: set[str] = set()
    values: list[str] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("-", "--"):
            i += 1
            break
        if word.startswith("--"):
            flags.add(word)
            if word in ("--rcfile", "--init-file"):
                i += 1
        elif word[:1] in "-+" and len(word) > 1:
            for ch in word[1:]:
                flags.add(ch)
                if ch in "oO":
                    i += 1
                    values.append(rest[i] if i < len(rest) else "")
        else:
            break
        i += 1
    operands = rest[i:]
    opaque = bool(flags & {"s", "i", "--interactive"}) or "expand_aliases" in values
    if "c" in flags:
        return Runs(scripts=tuple(operands[:1]), opaque=opaque or not operands)
    if not operands:
        return Runs(opaque=True)  # commands from stdin
    return Runs(opaque=opaque or not plain_file(operands[0]))


def builtin(words: list[str]) -> Runs:
    """What a builtin in `BUILTINS` runs beyond its own part."""
    name, args = words[0], words[1:]
    if name in ("fc", "let"):
        return Runs(opaque=True)  # fc re-runs history; let evaluates variables' values as arithmetic
    if name in ("test", "["):
        return Runs(opaque="-v" in args)  # -v 'a[$(cmd)]' evaluates the subscript
    if name == "trap":
        opts, operands = _getopts(args, "")
        acts = len(operands) >= 2 and operands[0] not in ("", "-")
        return Runs(scripts=(operands[0],) if acts else ())
    if name == "alias":
        return Runs(opaque=any("=" in a for a in args))
    if name == "shopt":
        return Runs(opaque="expand_aliases" in args and "-u" not in args)
    if name == "hash":
        opts, _ = _getopts(args, "p")
        return Runs(command=(opts["p"],) if opts.get("p") else ())
    if name == "enable":
        opts, _ = _getopts(args, "f")
        return Runs(opaque="f" in opts)
    if name == "compgen":
        opts, _ = _getopts(args, "ACFGPSWXo")
        return Runs(scripts=(opts["C"],) if "C" in opts else ())
    if name in ("source", "."):
        _, operands = _getopts(args, "")
        return Runs(opaque=not operands or not plain_file(operands[0]))
    return _sets_variables(name, args)


def _sets_variables(name: str, args: list[str]) -> Runs:
    """declare/export/read/printf -v/mapfile: a code-carrying variable, a name built at run time, a subscript
    (evaluated as arithmetic) or the integer attribute makes the builtin opaque; mapfile -C runs a script."""
    takes = {"read": "adinNptu", "printf": "v", "mapfile": "CcdnOsu", "readarray": "CcdnOsu"}.get(name, "")
    opts, operands = _getopts(args, takes)
    if name == "printf":
        names = [opts["v"]] if "v" in opts else []
    elif name in ("mapfile", "readarray"):
        names = operands[-1:]
    elif name == "read":
        names = operands + ([opts["a"]] if "a" in opts else [])
    else:
        names = [a.split("=", 1)[0] for a in operands]
    assigns = tuple(n for n in names if code_var(n))
    opaque = "i" in opts and name not in ("read", "mapfile", "readarray")
    opaque = opaque or any(_NAME.fullmatch(n) is None for n in names if "f" not in opts)
    if name in ("declare", "typeset", "local", "export", "readonly"):  # also `declare -n ref=BASH_ENV`
        opaque = opaque or any(_CODE_VAR_IN.search(a) for a in operands)
    script = opts.get("C", "") if name in ("mapfile", "readarray") else ""
    return Runs(scripts=(script,) if script else (), assigns=assigns, opaque=opaque)


def _getopts(args: list[str], takes_value: str) -> tuple[dict[str, str], list[str]]:
    """A builtin's options as bash reads them (stop at the first operand or `--`), and its operands."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if word[:1] not in "-+" or len(word) < 2:
            break
        for j, ch in enumerate(word[1:]):
            if ch in takes_value:
                value = word[j + 2 :]
                if not value:
                    i += 1
                    value = args[i] if i < len(args) else ""
                opts[ch] = value
                break
            opts[ch] = ""
        i += 1
    return opts, args[i:]
