"""npm packages the tests drive fugu with (Codex, Claude's TypeScript Agent SDK, MCP servers), installed from
the npm registry on first use into `.test-deps/node/NAME` (git-ignored, kept between runs), one install at
a time. A test that needs one skips, saying why, only when node or npm is not installed."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

DEPS = Path(__file__).resolve().parent.parent / ".test-deps"
CODEX = "@openai/codex@0.171.0"
AGENT_SDK = "@anthropic-ai/claude-agent-sdk@0.3.333"
FILESYSTEM_SERVER = "@modelcontextprotocol/server-filesystem@2026.8.31"


def node_or_skip() -> tuple[str, str]:
    """(node, npm), or the test is skipped because they are not installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed (the test drives an npm package with them)")
    return node, npm


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def installed(name: str, packages: Sequence[str], *, optional: bool = True) -> tuple[Path | None, str]:
    """`.test-deps/node/NAME/node_modules` with `packages` in it (installed now if they are not), or None
    and npm's last words when npm could not install them. `optional=False` leaves out optional
    dependencies (native binaries the test does not need)."""
    _, npm = node_or_skip()
    folder = DEPS / "node" / name
    digest = hashlib.sha256(" ".join([*packages, str(optional)]).encode()).hexdigest()[:16]
    marker = folder / f".installed-{digest}"
    with _locked(DEPS / f".{name}.lock"):
        if marker.exists():
            return folder / "node_modules", ""
        folder.mkdir(parents=True, exist_ok=True)
        argv = [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--no-save", *packages]
        if not optional:
            argv.append("--omit=optional")
        env = os.environ | {"npm_config_update_notifier": "false"}
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=env)
        if done.returncode != 0:
            return None, (done.stderr or done.stdout).strip()[-800:]
        marker.write_text(" ".join(packages) + "\n")
    return folder / "node_modules", ""


def require(name: str, packages: Sequence[str], *, optional: bool = True) -> Path:
    """`installed`, failing the test when npm cannot install the packages."""
    modules, why = installed(name, packages, optional=optional)
    if modules is None:
        pytest.fail(f"npm could not install {' '.join(packages)}: {why}")
    return modules
