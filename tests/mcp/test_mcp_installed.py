"""MCP servers installed the usual ways, outside the folders the sandbox keeps visible (under a temporary
folder, which the sandbox's private /tmp hides): a Python server in its own virtualenv (`mcp-server-time`
from PyPI), an npm server in a `node_modules` (`@modelcontextprotocol/server-filesystem`), started as the
package's `.bin` link or as `node .../dist/index.js`, and `npx -y` once npm has cached the package. Each
starts in the default sandbox and answers a tool call; a server that cannot start says its last words."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fugu_cli.extension_config import ServerSpec
from fugu_cli.mcp.manager import McpManager, McpUnavailable
from fugu_cli.tools.sandbox import SandboxPolicy, unavailable_reason
from tests.helpers import make_repo
from tests.npm_kit import DEPS, FILESYSTEM_SERVER, node_or_skip, require

TIME_SERVER = "mcp-server-time==2026.10.19"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv under a temporary folder with mcp-server-time in it (wheels kept in .test-deps)."""
    wheels = DEPS / "wheels"
    if not any(wheels.glob("mcp_server_time-*.whl")):
        pip = [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), TIME_SERVER]
        subprocess.run(pip, check=True, timeout=600)
    folder = tmp_path_factory.mktemp("servers") / "venv"
    # made with uv (a dev dependency), as `uv venv` and `uv pip install` make one: `python -m venv` spends
    # about 6 s of CPU installing pip into it, which nothing here uses
    uv = str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(folder)], check=True, timeout=300)
    install = [uv, "pip", "install", "-q", "--python", str(folder / "bin" / "python"), "--no-index"]
    subprocess.run([*install, "--find-links", str(wheels), TIME_SERVER], check=True, timeout=600)
    return folder


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node_modules under a temporary folder with the filesystem server in it (a copy of the one npm
    installed into .test-deps)."""
    cached = require("fs-server", [FILESYSTEM_SERVER])
    folder = tmp_path_factory.mktemp("npm") / "node_modules"
    shutil.copytree(cached, folder, symlinks=True)
    return folder


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if unavailable_reason() is not None:
        pytest.skip(f"the sandbox cannot run here: {unavailable_reason()}")
    return make_repo(tmp_path / "repo")


@pytest.fixture
def manager(repo: Path, tmp_path: Path) -> Iterator[list[McpManager]]:
    made: list[McpManager] = []
    yield made
    for m in made:
        m.close()


def _start(made: list[McpManager], repo: Path, tmp_path: Path, **spec: object) -> McpManager:
    server = ServerSpec(name="srv", transport="stdio", source="test", startup_timeout_s=60, **spec)  # type: ignore[arg-type]
    m = McpManager([server], repo, SandboxPolicy(), tmp_path / "home")
    made.append(m)
    return m


def test_a_server_in_a_virtualenv_under_tmp(
    venv: Path, repo: Path, tmp_path: Path, manager: list[McpManager]
) -> None:
    by_path = _start(manager, repo, tmp_path, command=str(venv / "bin" / "mcp-server-time"))
    text, is_error, _ = by_path.call_tool("srv", "get_current_time", {"timezone": "Asia/Tokyo"})
    assert not is_error and '"timezone": "Asia/Tokyo"' in text, text
    on_path = _start(
        manager,
        repo,
        tmp_path / "b",
        command="mcp-server-time",
        env={"PATH": f"{venv / 'bin'}:/usr/bin:/bin"},
    )
    text, is_error, _ = on_path.call_tool(
        "srv", "convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
    )
    assert not is_error and "Europe/Paris" in text, text


def test_an_npm_server_in_node_modules_under_tmp(
    node_modules: Path, repo: Path, tmp_path: Path, manager: list[McpManager]
) -> None:
    node, _ = node_or_skip()
    link = node_modules / ".bin" / "mcp-server-filesystem"
    script = node_modules / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
    for i, (command, args) in enumerate([(str(link), [str(repo)]), (node, [str(script), str(repo)])]):
        m = _start(manager, repo, tmp_path / str(i), command=command, args=tuple(args))
        text, is_error, _ = m.call_tool("srv", "list_directory", {"path": str(repo)})
        assert not is_error and "calc.py" in text and "test_calc.py" in text, text


def test_npx_runs_a_package_npm_has_cached(
    node_modules: Path, repo: Path, tmp_path: Path, manager: list[McpManager]
) -> None:
    node_or_skip()
    npx = shutil.which("npx")
    assert npx is not None
    warm = subprocess.run(
        [npx, "-y", FILESYSTEM_SERVER, str(repo)], stdin=subprocess.DEVNULL, capture_output=True, timeout=300
    )  # outside the sandbox, as the user's first run would: npm fetches and caches the package
    assert b"running on stdio" in warm.stderr, warm.stderr[-500:]
    m = _start(manager, repo, tmp_path, command="npx", args=("-y", FILESYSTEM_SERVER, str(repo)))
    text, is_error, _ = m.call_tool("srv", "list_directory", {"path": str(repo)})
    assert not is_error and "calc.py" in text, text


def test_a_server_that_cannot_start_says_its_last_words(
    venv: Path, repo: Path, tmp_path: Path, manager: list[McpManager]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "server.py").write_text(
        "import sys\nprint('loading config', file=sys.stderr)\n"
        "print('token sk-ant-abcdefghijklmnopqrstuvwxyz0123 rejected', file=sys.stderr)\n"
        "raise SystemExit('cannot reach the database')\n"
    )
    m = _start(
        manager, repo, tmp_path, command=str(venv / "bin" / "python"), args=(str(broken / "server.py"),)
    )
    with pytest.raises(McpUnavailable) as failed:
        m.call_tool("srv", "anything", {})
    said = str(failed.value)
    assert "loading config | token [REDACTED] rejected | cannot reach the database" in said, said
    assert "sk-ant-" not in said
