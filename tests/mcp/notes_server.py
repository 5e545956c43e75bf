"""An MCP server written for the tests with the SDK's MCPServer: `python notes_server.py` serves stdio,
`python notes_server.py --http PORT` streamable HTTP on 127.0.0.1. Tools that add, look up, report what the
server can see (its environment, its folder, the caller's Authorization header), answer with megabytes,
return a picture, hang and crash; a prompt; a resource.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, Image, MCPServer

server = MCPServer("notes")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations={"readOnlyHint": True})
def lookup(key: str) -> str:
    """Look up a note by key (read-only)."""
    return {"release": "the release is on Friday"}.get(key, f"no note {key!r}")


@server.tool()
def surroundings() -> str:
    """What the server sees: its environment's names, its working directory, whether it can write there."""
    probe = Path("mcp-wrote-this.txt")
    try:
        probe.write_text("x")
        writable = True
    except OSError:
        writable = False
    home = os.environ.get("FUGU_HOME_SEEN", "")
    return json.dumps({"env": sorted(os.environ), "cwd": os.getcwd(), "writable": writable, "home": home})


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header this call came with (over HTTP): its SHA-256 prefix and the header itself."""
    auth = (ctx.headers or {}).get("authorization", "")
    if not auth:
        return "no Authorization header"
    return f"sha256 {hashlib.sha256(auth.encode()).hexdigest()[:12]}: {auth}"


@server.tool(annotations={"readOnlyHint": True})
def screenshot() -> Image:
    """The app's screen as a picture (a 1x1 PNG)."""
    return Image(data=base64.b64decode(PIXEL), format="png")


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@server.tool()
def crash() -> str:
    """Exit the server at once."""
    os._exit(3)


@server.tool()
def big(megabytes: float) -> str:
    """A text answer of this many megabytes (numbered lines, so the kept output can be checked)."""
    size = int(megabytes * 1024 * 1024)
    lines, total, i = [], 0, 0
    while total < size:
        line = f"line {i} " + "x" * 60
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines)


@server.tool()
def hang(seconds: float) -> str:
    """Sleep this long before answering."""
    import time

    time.sleep(seconds)
    return f"slept {seconds}"


@server.prompt()
def review(path: str) -> str:
    """Ask for a review of one file."""
    return f"Please review {path} for off-by-one errors."


@server.resource("notes://today")
def today() -> str:
    """Today's note."""
    return "Buy milk and ship the release."


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
