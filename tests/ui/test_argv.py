"""A first word close to a subcommand is refused before anything is sent: `fugu sesions` costs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from fugu_cli.cli import SUBCOMMANDS, run
from fugu_cli.ui.argv import RUN_FLAGS, distance, first_positional, near_subcommand
from tests.helpers import fugu, make_repo, write_pool
from tests.loopback import LoopbackServer


def test_run_flags_are_exactly_the_run_commands_options_without_a_value() -> None:
    root = typer.Typer(add_completion=False)  # as cli.main builds it
    root.command()(run)
    command = typer.main.get_command(root)
    flags = {
        name
        for p in command.params
        if getattr(p, "is_flag", False) or getattr(p, "count", False)  # typer vendors its own click
        for name in (*p.opts, *p.secondary_opts)
    }
    assert "-p" in flags and "--max-turns" not in flags
    assert flags | {"--help"} == RUN_FLAGS


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["sesions"], "sesions"),
        (["--pool", "pool.toml", "sesions"], "sesions"),
        (["--worker=demo", "fix it"], "fix it"),
        (["-y", "--max-turns", "3", "task"], "task"),
        (["--", "-p"], None),
        (["--yes"], None),
    ],
)
def test_the_first_positional_word_skips_options_and_their_values(args: list[str], word: str | None) -> None:
    assert first_positional(args) == word


def test_distance_counts_insertions_deletions_and_substitutions() -> None:
    assert distance("sesions", "sessions") == 1
    assert distance("sessoins", "sessions") == 2
    assert distance("kitten", "sitting") == 3
    assert distance("", "mcp") == 3


@pytest.mark.parametrize(
    ("args", "near"),
    [
        (["sesions"], ("sesions", "sessions")),
        (["sesions", "show", "abc"], ("sesions", "sessions")),
        (["--pool", "p.toml", "doctr"], ("doctr", "doctor")),
        (["serv"], ("serv", "serve")),
        (["ruoter", "info"], ("ruoter", "router")),
        (["Sessions"], ("Sessions", "sessions")),
        (["pol"], ("pol", "pool")),
    ],
)
def test_near_misses_are_caught(args: list[str], near: tuple[str, str]) -> None:
    assert near_subcommand(args, SUBCOMMANDS) == near


@pytest.mark.parametrize(
    "args",
    [
        ["-p", "sesions"],
        ["sesions", "--print"],
        ["sesions list"],  # quoted: a task of several words
        ["fix the failing test"],
        ["hello"],  # two edits from `help`, but `help` is short: one edit is the limit there
        ["hey"],
        ["refactor"],
        ["sessions"],  # the subcommand itself is dispatched elsewhere
        ["--model", "eval", "fix it"],  # an option's value is not the first word
        [],
    ],
)
def test_tasks_are_left_alone(args: list[str]) -> None:
    assert near_subcommand(args, SUBCOMMANDS) is None


def test_fugu_sesions_exits_2_with_the_suggestion_and_sends_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    with LoopbackServer() as server:
        worker = {"name": "w", "model": "openai/w", "api_base": server.base_url}
        pool = write_pool(tmp_path / "pool.toml", [worker])
        typo = fugu("sesions", "--pool", str(pool), cwd=repo, stdin="", timeout=600)
        assert typo.code == 2
        assert "did you mean `sessions`?" in typo.stderr
        assert "fugu -p sesions" in typo.stderr
        assert typo.stdout == ""
        assert server.requests == []  # not even the pool's reachability probe
        asked = fugu("-p", "sesions", "--pool", str(pool), cwd=repo, timeout=600)  # a loaded machine is slow
        assert asked.code == 0, asked.stderr
        assert any(r.method == "POST" for r in server.requests)  # -p sends it as the task it says it is
