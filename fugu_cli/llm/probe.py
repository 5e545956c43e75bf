"""Cheap availability checks for a worker: its key is set and its server (if any) answers.

Must stay light: standard library only, never imports litellm.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from fugu_cli.types import Worker


def check_available(worker: Worker, timeout_s: float = 3.0) -> tuple[bool, str]:
    """(ok, reason): reason says what is missing ("OPENAI_API_KEY not set", "no answer from URL")."""
    if worker.api_key_env and not os.environ.get(worker.api_key_env):
        return False, f"{worker.api_key_env} not set"
    if worker.api_base:
        if not _server_answers(worker.api_base, timeout_s):
            return False, f"no answer from {worker.api_base}"
        return True, f"{worker.api_base} answers"
    if worker.api_key_env:
        return True, f"{worker.api_key_env} set"
    return True, "no key needed"


def _server_answers(api_base: str, timeout_s: float) -> bool:
    """Any HTTP reply counts (a 401 or 404 still proves a server is there); falls back to a TCP connect."""
    url = api_base.rstrip("/") + "/models"
    # Local servers must be reached directly even when the user has an HTTP proxy configured.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return _tcp_connects(api_base, timeout_s)


def _tcp_connects(api_base: str, timeout_s: float) -> bool:
    parts = urlsplit(api_base)
    if not parts.hostname:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def ollama_workers(timeout_s: float = 0.3) -> list[Worker]:
    """Workers for the models of a local Ollama server (`OLLAMA_HOST`, default 127.0.0.1:11434) if it answers.

    The model named by `FUGU_OLLAMA_MODEL` comes first (highest priority); otherwise Ollama's own order.
    """
    host = os.environ.get("OLLAMA_HOST", "http://127.0.0.1:11434")
    if "://" not in host:
        host = f"http://{host}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{host.rstrip('/')}/api/tags", timeout=timeout_s) as reply:
            names = [m["name"] for m in json.load(reply).get("models", []) if m.get("name")]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    preferred = os.environ.get("FUGU_OLLAMA_MODEL")
    names.sort(key=lambda n: n != preferred)
    return [
        Worker(
            name=f"ollama-{n.replace(':', '-')}",
            model=f"ollama_chat/{n}",
            api_base=host,
            description=f"Local model {n} served by Ollama: free and private; best for small, routine steps.",
            priority=-i,
            price_in=0.0,
            price_out=0.0,
        )
        for i, n in enumerate(names)
    ]
