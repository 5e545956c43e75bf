"""What a command line's first word is, before anything is parsed: a word close to a subcommand (`fugu
sesions`) is a typo, not a task to pay workers for. Standard library only; never prints.
"""

from __future__ import annotations

from collections.abc import Sequence

# The run command's options that take no value (every other option does, unless written `--name=value`):
# needed to tell an option's value from the first positional word. tests/ui/test_argv.py checks the list
# against the command's own parameters.
RUN_FLAGS = frozenset(
    {
        "-p",
        "--print",
        "--include-partial-messages",
        "--yes",
        "-y",
        "--continue",
        "-c",
        "--ultra",
        "--verbose",
        "--trust-project",
        "--debug",
        "--no-repo-map",
        "--strict-mcp-config",
        "--await-initialize",
        "--version",
        "--help",
    }
)


def first_positional(args: Sequence[str]) -> str | None:
    """The first word that is neither an option nor an option's value."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--":
            break
        elif arg.startswith("-") and len(arg) > 1:
            skip = "=" not in arg and arg not in RUN_FLAGS
        else:
            return arg
    return None


def distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def near_subcommand(args: Sequence[str], subcommands: Sequence[str]) -> tuple[str, str] | None:
    """(the word, the subcommand it is close to) when the first positional word is a one-word near miss of a
    subcommand and the task was not asked for with -p/--print; else None. Close is an edit distance of at
    most 2, or 1 for names of four letters or fewer (so `hello` is not taken for `help`)."""
    head = args[: args.index("--")] if "--" in args else args
    if "-p" in head or "--print" in head:
        return None
    word = first_positional(args)
    if word is None or len(word.split()) != 1 or word in subcommands:
        return None
    best = min(subcommands, key=lambda name: distance(word.lower(), name))
    limit = 1 if len(best) <= 4 else 2
    return (word, best) if distance(word.lower(), best) <= limit else None
