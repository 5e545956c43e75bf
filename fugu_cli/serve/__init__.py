"""`fugu serve`: an OpenAI-compatible endpoint on starlette + uvicorn. Model `fugu` is the router-only
pass-through (a client's own agent loop, routed call by call); `fugu-agent`, `fugu-ultra` and `fugu/<worker>`
run fugu's own agent in the served repository.

Modules, bottom up: options and wire (shapes, errors), params and conversation (requests), passthrough and
turns (the blocking work), responses (the Responses API), hub (shared state), sse (threads and streams),
routes and guard (HTTP), server (uvicorn). Prints nothing but `main`'s listening line and warnings.
"""

from __future__ import annotations

import logging
import sys
import threading

from fugu_cli.errors import FuguError
from fugu_cli.serve.options import ServeOptions
from fugu_cli.serve.routes import MAX_BODY
from fugu_cli.serve.server import FuguServer
from fugu_cli.serve.wire import MODELS, ApiError

log = logging.getLogger("fugu")

__all__ = ["MAX_BODY", "MODELS", "ApiError", "FuguServer", "ServeOptions", "main"]


def main(options: ServeOptions) -> int:
    """Serve until SIGINT or SIGTERM. Returns the exit code (2: cannot listen or bad configuration)."""
    try:
        server = FuguServer(options)
    except FuguError as e:
        print(f"fugu serve: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        print(
            f"fugu serve: cannot listen on {options.host}:{options.port}: {e.strerror or e}", file=sys.stderr
        )
        return 2
    print(f"fugu serve: listening on {server.url} (repository {server.root})", flush=True)
    if not server.api_key and not options.loopback_only:
        print(
            "fugu serve: warning: listening beyond loopback without an API key", file=sys.stderr, flush=True
        )
    threading.Thread(target=_warm, args=(server,), name="fugu-warm", daemon=True).start()
    server.run()
    return 0


def _warm(server: FuguServer) -> None:
    try:
        server.hub.warm()
    except Exception:  # the first request reports what is wrong, in OpenAI's shape
        log.warning("warming the server up failed", exc_info=True)
