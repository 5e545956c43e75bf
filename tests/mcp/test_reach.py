"""What a stdio MCP server's command needs to read (mcp/reach.py), on real files laid out as pip, venv and
npm lay them out: the folders found, and nothing wider."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from fugu_cli.mcp.reach import npx_cached, readable


def _venv(root: Path) -> Path:
    """A virtualenv's shape: pyvenv.cfg naming the base Python, a console script whose #! is its python."""
    (root / "bin").mkdir(parents=True)
    base = Path(sys.base_prefix) / "bin"
    (root / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")
    (root / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    script = root / "bin" / "mcp-server-time"
    script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    return root


def test_a_virtualenv_script_needs_the_venv_and_its_base_python(tmp_path: Path) -> None:
    venv = _venv(tmp_path / "servers" / "venv")
    found = readable([str(venv / "bin" / "mcp-server-time"), "--local-timezone", "UTC"])
    assert venv in found and venv / "bin" in found
    assert Path(sys.base_prefix) / "bin" in found
    assert tmp_path / "servers" not in found and tmp_path not in found  # nothing wider
    on_path = readable(["mcp-server-time"], {"PATH": f"{venv / 'bin'}:/usr/bin"})
    assert venv in on_path
    assert readable(["no-such-program-anywhere"], {"PATH": str(venv / "bin")}) == []


def test_an_npm_bin_link_needs_its_outermost_node_modules(tmp_path: Path) -> None:
    modules = tmp_path / "proj" / "node_modules"
    package = modules / "@scope" / "server" / "dist"
    package.mkdir(parents=True)
    (package / "index.js").write_text("#!/usr/bin/env node\n")
    (modules / ".bin").mkdir()
    (modules / ".bin" / "server").symlink_to(Path("..") / "@scope" / "server" / "dist" / "index.js")
    found = readable([str(modules / ".bin" / "server"), str(tmp_path / "data")])
    assert modules in found and package in found and tmp_path / "proj" not in found
    script = readable(["node", str(package / "index.js")], {"PATH": os.environ["PATH"]})
    assert modules in script


def test_a_package_folder_outside_node_modules_is_kept_whole(tmp_path: Path) -> None:
    app = tmp_path / "app"
    (app / "dist").mkdir(parents=True)
    (app / "node_modules").mkdir()
    (app / "package.json").write_text("{}")
    (app / "dist" / "index.js").write_text("")
    assert app in readable(["node", str(app / "dist" / "index.js")])
    bare = tmp_path / "bare"
    (bare / "dist").mkdir(parents=True)
    (bare / "package.json").write_text("{}")  # no node_modules: nothing beyond the script's folder
    (bare / "dist" / "index.js").write_text("")
    assert bare not in readable(["node", str(bare / "dist" / "index.js")])


def test_npx_runs_its_earlier_install_of_the_package(tmp_path: Path) -> None:
    spec = "@scope/server@1.2.3"
    modules = tmp_path / ".npm" / "_npx" / hashlib.sha512(spec.encode()).hexdigest()[:16] / "node_modules"
    (modules / "@scope" / "server").mkdir(parents=True)
    (modules / "@scope" / "server" / "package.json").write_text(json.dumps({"bin": {"mcp-server": "x.js"}}))
    (modules / ".bin").mkdir()
    (modules / ".bin" / "mcp-server").write_text("#!/usr/bin/env node\n")
    env = {"HOME": str(tmp_path)}
    assert npx_cached(["npx", "-y", spec, "/data"], env) == [str(modules / ".bin" / "mcp-server"), "/data"]
    assert npx_cached(["npx", "-y", "@scope/server@9", "/data"], env) == [
        "npx",
        "-y",
        "@scope/server@9",
        "/data",
    ]
    assert npx_cached(["npx", "--package", spec, "mcp-server"], env)[0] == "npx"  # left to npx
    assert npx_cached(["uvx", "thing"], env) == ["uvx", "thing"]
