"""Shell completions: the committed scripts match what tools/gen_completions.py makes; bash's works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("fugu.bash", "fugu.zsh", "fugu.fish")


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
        assert (ROOT / "completions" / name).read_text() == fresh, (
            f"completions/{name} is stale: run python tools/gen_completions.py"
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
        f"source {ROOT / 'completions' / 'fugu.bash'}\n"
        f"COMP_WORDS=(fugu {' '.join(repr(w) if w else repr('') for w in words)})\n"
        f"COMP_CWORD={len(words)}\nCOMP_LINE={line!r}\n_fugu\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, check=True)
    return [w for w in out.stdout.splitlines() if w]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (("",), ["pool", "demo", "eval", "serve", "sessions", "router"]),
        (("--perm",), ["--permission-mode", "--permission-prompt-tool"]),
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
        (("sessions", ""), ["show"]),
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
