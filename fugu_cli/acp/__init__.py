"""`fugu acp`: fugu as an Agent Client Protocol agent over stdio, for editors (Zed, JetBrains IDEs, Neovim).

The only package that imports `acp` (the agent-client-protocol SDK), and only when the command runs. stdout
belongs to the protocol: nothing else may print there (fugu's notices go out as session updates, errors to
stderr and the log).
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from typing import Any, cast

from fugu_cli.options import RunOptions


def main(opts: RunOptions) -> int:
    """Serve ACP on stdin/stdout until the client closes stdin; exit 2 when they are not pipes."""
    for fd, name in ((0, "stdin"), (1, "stdout")):
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            print(
                f"fugu: fugu acp talks over pipes: its {name} is a file. An editor starts it with pipes "
                "(README.md: In your editor)",
                file=sys.stderr,
            )
            return 2
    return asyncio.run(_serve(opts))


async def _serve(opts: RunOptions) -> int:
    from acp import run_agent

    from fugu_cli.acp.server import FuguAgent

    agent = FuguAgent(opts)
    try:
        # the SDK's Agent protocol lists every method, unstable ones too; fugu answers the stable ones and
        # the SDK says method-not-found for the rest
        await run_agent(cast(Any, agent))
    finally:
        agent.close()
    return 0
