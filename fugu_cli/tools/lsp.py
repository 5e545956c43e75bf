"""A language server's diagnostics for some files, asked once: the server (`[checks] lsp`, e.g. ["pylsp"]) is
started in the sandbox in the repository root, told about the files (initialize, didOpen), and its
`textDocument/publishDiagnostics` for each are collected until all came or the timeout passed; then it is
shut down and everything it started dies with it. JSON-RPC over stdio with Content-Length framing.

Never raises for a server that is missing or misbehaves: that is said in the text returned.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.base import Invocation
from fugu_cli.tools.shell import effective_policy

SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}
LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".go": "go", ".rs": "rust"}


def diagnostics(inv: Invocation, command: Sequence[str], paths: Sequence[Path], timeout_s: float) -> str:
    """`path:line:col: severity: message` lines for `paths` ('' when the server found nothing)."""
    try:
        proc, _ = sb.spawn(
            list(command),
            cwd=inv.root,
            policy=effective_policy(inv.ctx),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as e:
        return f"[the language server {command[0]} could not start: {e.strerror or e}]"
    deadline = time.monotonic() + timeout_s
    try:
        return _session(inv, proc, paths, deadline)
    except (OSError, ValueError) as e:
        return f"[the language server {command[0]} failed: {e}]"
    finally:
        sb.kill_tree(proc)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _session(inv: Invocation, proc: subprocess.Popen[bytes], paths: Sequence[Path], deadline: float) -> str:
    uris = {p.resolve().as_uri(): inv.rel(p) for p in paths}
    _send(proc, {"id": 1, "method": "initialize", "params": _init_params(inv.root)})
    if _wait_for(proc, deadline, lambda m: m.get("id") == 1) is None:
        return "[the language server did not answer initialize in time]"
    _send(proc, {"method": "initialized", "params": {}})
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        language = LANGUAGES.get(path.suffix, path.suffix.lstrip("."))
        doc = {"uri": path.resolve().as_uri(), "languageId": language, "version": 1, "text": text}
        _send(proc, {"method": "textDocument/didOpen", "params": {"textDocument": doc}})
    found: dict[str, list[str]] = {}
    while len(found) < len(uris):
        message = _wait_for(proc, deadline, lambda m: m.get("method") == "textDocument/publishDiagnostics")
        if message is None:
            break
        params = message.get("params") or {}
        uri = params.get("uri")
        if uri in uris:
            found[uri] = [_line(uris[uri], d) for d in params.get("diagnostics") or ()]
    _send(proc, {"id": 2, "method": "shutdown"})
    _send(proc, {"method": "exit"})
    lines = [line for uri in uris for line in found.get(uri, ())]
    missing = [uris[u] for u in uris if u not in found]
    if missing:
        lines.append(f"[no diagnostics came in time for {', '.join(missing)}]")
    return "\n".join(lines)


def _init_params(root: Path) -> dict[str, Any]:
    return {
        "processId": os.getpid(),
        "rootUri": root.as_uri(),
        "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
        "capabilities": {"textDocument": {"publishDiagnostics": {}}},
    }


def _line(rel: str, d: dict[str, Any]) -> str:
    start = (d.get("range") or {}).get("start") or {}
    where = f"{rel}:{int(start.get('line', 0)) + 1}:{int(start.get('character', 0)) + 1}"
    source = f" [{d['source']}]" if d.get("source") else ""
    return f"{where}: {SEVERITY.get(d.get('severity') or 1, 'error')}: {d.get('message', '')}{source}"


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    try:
        proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        proc.stdin.flush()
    except BrokenPipeError:
        raise OSError("it closed its input") from None


def _wait_for(proc: subprocess.Popen[bytes], deadline: float, wanted: Any) -> dict[str, Any] | None:
    """The next message `wanted` accepts (others are skipped; a request from the server gets a null
    answer), or None at the deadline or the end of its output."""
    while True:
        message = _read(proc, deadline)
        if message is None:
            return None
        if wanted(message):
            return message
        if "id" in message and "method" in message:  # the server asks something (configuration): no answer
            _send(proc, {"id": message["id"], "result": None})


def _read(proc: subprocess.Popen[bytes], deadline: float) -> dict[str, Any] | None:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    header = b""
    while b"\r\n\r\n" not in header:
        chunk = _take(fd, 1, deadline)
        if not chunk:
            return None
        header += chunk
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    body = b""
    while len(body) < length:
        chunk = _take(fd, length - len(body), deadline)
        if not chunk:
            return None
        body += chunk
    data = json.loads(body)
    return data if isinstance(data, dict) else {}


def _take(fd: int, size: int, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0 or not select.select([fd], [], [], left)[0]:
        return b""
    return os.read(fd, size)
