"""Where MCP servers and hooks come from: fugu's config layers, `.mcp.json`, `.claude/settings.json`; what a
folder's trust changes; what a broken entry becomes (a notice, never a crash)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fugu_cli.config import load_config, trust
from fugu_cli.errors import ConfigError
from fugu_cli.extension_config import load_extensions, untrusted_extensions
from fugu_cli.hooks.runner import matches, tool_names
from fugu_cli.redact import redact
from tests.helpers import make_repo


def _user(text: str) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(text)


def _repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / ".fugu").mkdir()
    return repo


def test_servers_from_every_layer_and_their_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCS_TOKEN", "docs-token-0123456789")
    repo = _repo(tmp_path)
    _user('[mcp_servers.shared]\ncommand = "user-shared"\n\n[mcp_servers.mine]\ncommand = "mine"\n')
    (repo / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "shared": {"command": "json-shared"},
                    "docs": {"type": "http", "url": "${DOCS_URL:-http://127.0.0.1:9/mcp}",
                             "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
                    "needs": {"command": "x", "env": {"KEY": "${NOT_SET_ANYWHERE}"}},
                    "bad__name": {"command": "x"},
                    "sdk": {"type": "sdk", "name": "in-process"},
                }
            }
        )
    )  # fmt: skip
    (repo / ".fugu" / "config.toml").write_text("[mcp_servers.mine]\nenabled = false\n")
    untrusted = load_extensions(load_config(repo), repo)
    assert [s.name for s in untrusted.servers] == [
        "shared",
        "mine",
    ]  # the user's only, as the user wrote them
    assert (
        "did not load the MCP servers of .mcp.json (shared, docs, needs, bad__name, sdk)"
        in untrusted.notices[0]
    )
    assert untrusted_extensions(repo) == [".mcp.json servers (shared, docs, needs, bad__name, sdk)"]

    trusted = load_extensions(load_config(repo, trust_project=True), repo)
    servers = {s.name: s for s in trusted.servers}
    assert sorted(servers) == ["docs", "shared"]  # mine: disabled by the project; the rest skipped
    assert servers["shared"].source == "user config" and servers["shared"].command == "user-shared"
    assert servers["docs"].transport == "http" and servers["docs"].url == "http://127.0.0.1:9/mcp"
    assert servers["docs"].headers == {"Authorization": "Bearer docs-token-0123456789"}
    notes = " | ".join(trusted.notices)
    assert "'needs' in .mcp.json was skipped: ${NOT_SET_ANYWHERE} is not set" in notes
    assert "'bad__name' in .mcp.json was skipped" in notes and "'sdk' in .mcp.json was skipped" in notes
    # the bearer token is a secret now, wherever text is shown or stored
    assert redact("token docs-token-0123456789 leaked") == "token [docs header Authorization] leaked"


def test_hooks_of_every_layer_run_and_claudes_shape_is_read(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _user('[[hooks.PreToolUse]]\nmatcher = "Bash"\ncommand = "user-guard"\ntimeout = 5\n')
    (repo / ".fugu" / "config.toml").write_text(
        '[[hooks.PreToolUse]]\nmatcher = "Edit"\nhooks = [{type = "command", command = "project-guard"}]\n'
    )
    (repo / ".claude").mkdir()
    claude = {
        "hooks": {
            "PostToolUse": [
                {"matcher": "Write", "hooks": [{"type": "command", "command": "fmt", "timeout": 9}]}
            ],
            "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
            "Stop": [{"hooks": [{"type": "prompt", "prompt": "are you done?"}]}],
        }
    }
    (repo / ".claude" / "settings.json").write_text(json.dumps(claude))
    untrusted = load_extensions(load_config(repo), repo)
    assert [(h.command, h.timeout_s) for h in untrusted.hooks] == [("user-guard", 5.0)]
    assert untrusted_extensions(repo) == [".claude/settings.json hooks"]
    trust(repo)
    assert untrusted_extensions(repo) == []
    trusted = load_extensions(load_config(repo), repo)
    assert [(h.event, h.matcher, h.command, h.timeout_s, h.source) for h in trusted.hooks] == [
        ("PreToolUse", "Bash", "user-guard", 5.0, "config"),
        ("PreToolUse", "Edit", "project-guard", 60.0, "config"),
        ("PostToolUse", "Write", "fmt", 9.0, ".claude/settings.json"),
    ]
    assert trusted.notices == (
        ".claude/settings.json: fugu does not run Notification hooks; they were skipped",
        ".claude/settings.json: fugu runs command hooks only; a prompt hook was skipped",
        ".claude/settings.json: a Stop hook was skipped: it has no command",
    )


def test_a_broken_extension_setting_is_a_clear_config_error(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _user('[[hooks.SessionEnd]]\ncommand = "x"\n')
    with pytest.raises(ConfigError, match=r"hooks\.SessionEnd"):
        load_config(repo)
    _user('[mcp_servers.both]\ncommand = "x"\nurl = "http://127.0.0.1/mcp"\n')
    with pytest.raises(ConfigError, match=r"either command .* or url"):
        load_config(repo)
    (repo / ".mcp.json").write_text("{not json")
    _user("")
    with pytest.raises(ConfigError, match=r"\.mcp\.json is not valid JSON"):
        load_extensions(load_config(repo, trust_project=True), repo)


def test_matchers_take_fugus_and_claudes_tool_names() -> None:
    assert matches("Bash", tool_names("shell")) and matches("shell", tool_names("shell"))
    assert matches("Edit|Write", tool_names("write_file")) and not matches("Edit|Write", tool_names("shell"))
    assert matches("", tool_names("grep")) and matches("*", tool_names("grep"))
    assert matches("mcp__github__.*", tool_names("mcp__github__create_issue"))
    assert not matches("Bash", tool_names("git_status")) and not matches("Bas", tool_names("shell"))
    assert matches("[", ("[",)) and not matches("[", tool_names("shell"))  # not a regex: the name itself


def test_a_servers_tool_timeout_comes_from_mcp_json_in_milliseconds_or_from_config(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _user('[mcp_servers.conf]\ncommand = "c"\ntool_timeout_s = 7\n')
    (repo / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "quick": {"command": "q", "timeout": 1500},
                    "plain": {"command": "p"},
                    "tiny": {"command": "t", "timeout": 30},
                    "word": {"command": "w", "timeout": "soon"},
                }
            }
        )
    )
    loaded = load_extensions(load_config(repo, trust_project=True), repo)
    timeouts = {s.name: s.tool_timeout_s for s in loaded.servers}
    assert timeouts == {"quick": 1.5, "plain": 120.0, "tiny": 0.03, "word": 120.0, "conf": 7.0}
    said = "\n".join(loaded.notices)
    assert "timeout 30 is in milliseconds, so a tool call gets 0.03 s (write 30000 for 30 s)" in said
    assert "timeout 'soon' is not a positive number of milliseconds; the default 120 s holds" in said
