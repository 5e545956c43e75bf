"""The stages `fugu router train` can run, named without importing what trains them (a wrong `--stage` is
refused before torch loads)."""

from __future__ import annotations

from typing import Literal

from fugu_cli.errors import UsageError

Stage = Literal["sft", "es", "both"]


def stage_named(name: str) -> Stage:
    """The training stage `name` asks for (`--stage`); a usage error otherwise."""
    stages: dict[str, Stage] = {"sft": "sft", "es": "es", "both": "both"}
    if name in stages:
        return stages[name]
    raise UsageError(f"--stage {name}: choose sft, es or both")
