"""`fugu` and `python -m fugu_cli`: answer `--version` before anything heavy is imported, else run the CLI."""

from __future__ import annotations

import os
import sys
from typing import Any


def before_imports() -> None:
    """What the process needs before anything heavy is imported: torch's OpenMP threads spin while idle by
    default, which slows a router decision several-fold on a busy 2-core machine, and OpenMP reads this
    when torch is loaded."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main() -> Any:
    before_imports()
    if sys.argv[1:] == ["--version"]:
        from fugu_cli import __version__

        print(f"fugu {__version__}")
        return 0
    from fugu_cli.classcache import install
    from fugu_cli.home import fugu_home

    install(fugu_home())  # before the imports that build fugu's dataclasses
    from fugu_cli.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
