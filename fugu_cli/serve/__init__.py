"""`fugu serve`: an OpenAI-compatible endpoint (models "fugu", "fugu-ultra", "fugu/<worker>") over sessions.

Wire shapes live in wire.py, the server and its session table in server.py, HTTP and SSE in http.py;
this module re-exports their public names and owns `main`. Standard library HTTP only.
Prints nothing but `main`'s listening line and warnings.
"""

from __future__ import annotations

import signal
import sys
import threading

from fugu_cli.errors import FuguError
from fugu_cli.serve.handler import MAX_BODY
from fugu_cli.serve.server import MAX_LIVE_SESSIONS, FuguServer, ServeOptions
from fugu_cli.serve.wire import MODELS, ApiError, ChatRequest, parse_request

__all__ = [
    "MAX_BODY",
    "MAX_LIVE_SESSIONS",
    "MODELS",
    "ApiError",
    "ChatRequest",
    "FuguServer",
    "ServeOptions",
    "main",
    "parse_request",
]


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
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    server.start()
    print(f"fugu serve: listening on {server.url} (repository {server.root})", flush=True)
    if not server.api_key and options.host not in ("127.0.0.1", "localhost", "::1"):
        print("fugu serve: warning: listening beyond loopback without --api-key", file=sys.stderr, flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
