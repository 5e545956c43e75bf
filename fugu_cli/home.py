"""Where fugu's state lives: `FUGU_HOME`, else the platform's user data directory. Imports next to nothing,
so `fugu`'s start-up can find its caches before the config module (and pydantic) loads."""

from __future__ import annotations

import os
from pathlib import Path


def fugu_home() -> Path:
    """Where all state lives: `FUGU_HOME`, else the platform's user data directory."""
    env = os.environ.get("FUGU_HOME")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("fugu", appauthor=False))
