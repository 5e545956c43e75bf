"""Fixtures for tool tests: a real git repo in tmp_path and a helper that calls tools through the registry."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import PermissionMode, ToolCall, ToolResult


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repo with one commit (README.md, src/app.py); its own identity so commits work anywhere."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "dev@example.com")
    git(root, "config", "user.name", "Dev")
    git(root, "config", "commit.gpgsign", "false")
    (root / "README.md").write_text("# demo\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


@pytest.fixture
def dirty(repo: Path) -> Path:
    """A repo with every kind of user state: staged, unstaged, untracked, ignored, nested."""
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "gone.txt").write_text("will be deleted later\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "more")
    (repo / "README.md").write_text("# demo\nstaged line\n")
    git(repo, "add", "README.md")
    (repo / "src/app.py").write_text("def main():\n    return 42\n")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "build.log").write_text("ignored v1\n")
    return repo


Call = Callable[..., ToolResult]


@pytest.fixture
def make_ctx(repo: Path) -> Callable[..., ToolContext]:
    def make(mode: PermissionMode = "full-auto", **kwargs: Any) -> ToolContext:
        policy = kwargs.pop("policy", None) or PermissionPolicy(mode=mode)
        return ToolContext(root=repo, agent="tester", policy=policy, **kwargs)

    return make


@pytest.fixture
def call(make_ctx: Callable[..., ToolContext]) -> Call:
    """call(name, ctx=None, **arguments): run one tool through the default registry (full-auto by default)."""
    registry = ToolRegistry.default()

    def run(name: str, ctx: ToolContext | None = None, **arguments: Any) -> ToolResult:
        return registry.run(ToolCall("call-1", name, json.dumps(arguments)), ctx or make_ctx())

    return run
