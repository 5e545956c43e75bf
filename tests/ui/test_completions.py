"""Shell completions: the committed scripts match what tools/gen_completions.py makes; bash's works."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("fugu.bash", "fugu.zsh", "fugu.fish")
SHIPPED = ROOT / "fugu_cli" / "data" / "completions"


def test_committed_completions_are_not_stale(tmp_path: Path) -> None:
    gen = subprocess.run(
        [sys.executable, "tools/gen_completions.py", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert gen.returncode == 0, gen.stderr
    for name in NAMES:
        fresh = (tmp_path / name).read_text()
        assert (SHIPPED / name).read_text() == fresh, (
            f"fugu_cli/data/completions/{name} is stale: run python tools/gen_completions.py"
        )
    (tmp_path / "fugu.zsh").write_text("# edited by hand\n")
    check = subprocess.run(
        [sys.executable, "tools/gen_completions.py", "--check", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 1 and "stale: fugu.zsh" in check.stderr


def complete(*words: str) -> list[str]:
    """What bash offers for `fugu WORDS…` (the last word is the one being completed)."""
    line = " ".join(["fugu", *words])
    script = (
        f"source {SHIPPED / 'fugu.bash'}\n"
        f"COMP_WORDS=(fugu {' '.join(repr(w) if w else repr('') for w in words)})\n"
        f"COMP_CWORD={len(words)}\nCOMP_LINE={line!r}\n_fugu\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            ("",),
            [
                "pool",
                "doctor",
                "completion",
                "demo",
                "eval",
                "serve",
                "acp",
                "sessions",
                "router",
                "conductor",
                "mcp",
            ],
        ),
        (("mcp", ""), ["list"]),
        (("mcp", "list", "--"), ["--json", "--trust-project", "--help"]),
        (("--perm",), ["--permission-mode", "--permission-prompt-tool", "--permission-prompts"]),
        (
            ("--permission-mode", ""),
            [
                "ask",
                "auto-edit",
                "full-auto",
                "read-only",
                "default",
                "acceptEdits",
                "bypassPermissions",
                "plan",
                "dontAsk",
            ],
        ),
        (("--output-format", "s"), ["stream-json"]),
        (("sessions", ""), ["show", "export"]),
        (("sessions", "export", "x", "--format", ""), ["md", "json", "html"]),
        (("sessions", "--l"), ["--limit"]),
        (("--continue", "router", ""), ["info", "train", "eval"]),
        (("pool", "--j"), ["--json"]),
    ],
)
def test_bash_completes_subcommands_options_and_choices(words: tuple[str, ...], expected: list[str]) -> None:
    assert complete(*words) == expected


def test_bash_completes_files_for_file_options(tmp_path: Path) -> None:
    (tmp_path / "pool.toml").write_text("")
    assert complete("--pool", str(tmp_path / "po")) == [str(tmp_path / "pool.toml")]


ZSH_STUBS = r"""
compadd() { local seen=0; for a in "$@"; do
  if [[ $seen == 1 ]]; then print -r -- "$a"; elif [[ $a == "--" ]]; then seen=1; fi; done }
_describe() { local name=${@[-1]} item; for item in "${(@P)name}"; do print -r -- "${item%%:*}"; done }
_files() { print -r -- "<files>" }
compdef() { : }
"""


def zsh_complete(*words: str) -> list[str]:
    """What the zsh script offers for `fugu WORDS…`, with zsh's completion builtins stubbed to print."""
    quoted = " ".join(repr(w) if w else "''" for w in words)
    setup = f"words=(fugu {quoted}); CURRENT={len(words) + 1}"
    script = f"{ZSH_STUBS}\nsource {SHIPPED / 'fugu.zsh'}\n{setup}\n_fugu\n"
    out = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


def fish_complete(line: str) -> list[str]:
    script = f"source {SHIPPED / 'fugu.fish'}; complete -C {line!r}"
    out = subprocess.run(["fish", "--no-config", "-c", script], capture_output=True, text=True, check=True)
    return [w.split("\t")[0] for w in out.stdout.splitlines() if w]


# CI installs zsh and fish (.ci/run); on a machine without them these two cannot run
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)")
def test_zsh_completes_subcommands_options_and_choices() -> None:
    assert zsh_complete("")[:3] == ["pool", "doctor", "completion"]
    assert {"--permission-mode", "--permission-prompt-tool", "--permission-prompts"} <= set(
        zsh_complete("--perm")
    )
    assert zsh_complete("--permission-mode", "")[:4] == ["ask", "auto-edit", "full-auto", "read-only"]
    assert zsh_complete("sessions", "") == ["show", "export"]
    assert zsh_complete("--pool", "") == ["<files>"]


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)")
def test_fish_completes_subcommands_options_and_choices() -> None:
    assert {"pool", "doctor", "sessions", "router"} <= set(fish_complete("fugu "))
    assert sorted(fish_complete("fugu --perm")) == [  # in fish's own order, which is not sorted()'s
        "--permission-mode",
        "--permission-prompt-tool",
        "--permission-prompts",
    ]
    assert "acceptEdits" in fish_complete("fugu --permission-mode ")
    assert sorted(fish_complete("fugu sessions ")) == ["export", "show"]


def test_the_installed_command_prints_the_shipped_scripts() -> None:
    for name in NAMES:
        shell = name.split(".")[1]
        out = subprocess.run(
            [sys.executable, "-m", "fugu_cli", "completion", shell],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout == (SHIPPED / name).read_text()
