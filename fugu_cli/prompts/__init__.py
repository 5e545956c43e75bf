"""Prompt texts shipped as markdown files beside this module. `load` reads one; nothing else lives here."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def load(name: str) -> str:
    """The text of `fugu_cli/prompts/<name>.md`."""
    return resources.files(__package__).joinpath(f"{name}.md").read_text(encoding="utf-8").strip()
