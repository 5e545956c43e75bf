"""Claude Code's tool rules and flags as fugu reads them (fugu_cli/compat.py)."""

from __future__ import annotations

import pytest

from fugu_cli.compat import screen_argv, split_tool_list, tool_rules
from fugu_cli.errors import UsageError
from fugu_cli.tools import PermissionPolicy
from fugu_cli.tools.shell import command_prefixes


def test_tool_lists_split_on_commas_and_spaces_but_keep_a_rule_whole() -> None:
    assert split_tool_list(["Bash(git log:*),Edit", "Read Grep"]) == [
        "Bash(git log:*)",
        "Edit",
        "Read",
        "Grep",
    ]
    assert split_tool_list(["Bash(npm run test) , Write"]) == ["Bash(npm run test)", "Write"]


def test_allowed_rules_grant_what_they_name_and_no_more() -> None:
    rules = tool_rules(["Bash(git status:*),Bash(pytest *),Edit,Read,Task"], [])
    assert rules.allow == ("shell:git status", "shell:pytest", "edit")
    assert rules.notes == ("--allowedTools Task: fugu has no such tool; ignored",)
    policy = PermissionPolicy(mode="ask", allow=list(rules.allow))
    decide = [policy.check("exec", p) for p in command_prefixes("git status -s && pytest -q")]
    assert decide == ["allow", "allow"]
    assert [policy.check("exec", p) for p in command_prefixes("git push")] == ["ask"]
    assert policy.check("edit", "edit") == "allow"


def test_a_path_scoped_edit_grant_is_not_widened() -> None:
    rules = tool_rules(["Edit(src/**)"], [])
    assert rules.allow == () and "not granted" in rules.notes[0]


def test_disallowed_tools_are_hidden_or_refused() -> None:
    rules = tool_rules([], ["Bash(rm:*)", "Write", "Grep", "mcp__github__create_issue", "mcp__jira__*"])
    assert rules.deny == ("shell:rm", "mcp__github__create_issue", "mcp__jira")
    assert rules.remove == ("write_file", "grep", "mcp__github__create_issue", "mcp__jira")
    policy = PermissionPolicy(mode="full-auto", deny=list(rules.deny))
    assert [policy.check("exec", p) for p in command_prefixes("rm -rf build; ls")] == ["deny", "allow"]
    whole = tool_rules([], ["Bash", "Edit"])
    assert whole.deny == ("shell", "edit") and whole.remove == ("shell", "edit_file", "write_file")


def test_a_refusal_fugu_cannot_scope_refuses_more_or_is_an_error() -> None:
    wider = tool_rules([], ["Edit(secrets/**)"])
    assert wider.deny == ("edit",) and "every edit is refused" in wider.notes[0]
    with pytest.raises(UsageError, match="cannot refuse reads of particular paths"):
        tool_rules([], ["Read(./.env)"])


def test_the_tools_flag_names_the_only_tools() -> None:
    assert tool_rules([], [], "Read,Grep,Bash").only == ("read_file", "grep", "shell")
    assert tool_rules([], [], "").only == ()
    assert tool_rules([], [], "default").only is None


def test_flags_fugu_cannot_honour_are_refused_and_tuning_flags_ignored_once() -> None:
    with pytest.raises(UsageError, match="--settings: fugu reads"):
        screen_argv(["--output-format", "stream-json", "--settings", "s.json"])
    assert screen_argv(["--add-dir", "../lib"]) == (["--add-dir", "../lib"], [])  # fugu's own flag now
    servers = ["--mcp-config", '{"mcpServers": {}}', "--strict-mcp-config"]
    assert screen_argv(servers) == (servers, [])  # fugu's own MCP client takes them
    with pytest.raises(UsageError, match="--permission-mode auto: fugu has no model that judges"):
        screen_argv(["-p", "x", "--permission-mode", "auto"])
    assert screen_argv(["--permission-mode", "acceptEdits"]) == (["--permission-mode", "acceptEdits"], [])
    with pytest.raises(UsageError, match="--session-id"):
        screen_argv(["--session-id=abc"])
    args, notes = screen_argv(
        ["-p", "x", "--fallback-model", "sonnet", "--setting-sources=user,project", "--include-hook-events"]
    )
    assert args == ["-p", "x"]
    assert [n.split(" ")[0] for n in notes] == ["--fallback-model", "--setting-sources"]
    assert screen_argv(["--", "--mcp-config"]) == (["--", "--mcp-config"], [])


def test_web_fetch_rules_name_hosts_and_a_refusal_hides_the_tools() -> None:
    rules = tool_rules(["WebFetch(domain:docs.python.org)"], ["WebFetch(domain:evil.example)"])
    assert (rules.allow, rules.deny, rules.remove) == (("web:docs.python.org",), ("web:evil.example",), ())
    policy = PermissionPolicy(mode="ask", allow=rules.allow, deny=rules.deny)
    assert policy.check("web", "web:docs.python.org") == "allow"
    assert policy.check("web", "web:evil.example") == "deny"
    assert policy.check("web", "web:other.example") == "ask"
    assert tool_rules(["WebFetch"], []).allow == ("web",)
    refused = tool_rules([], ["WebFetch", "WebSearch"])
    assert refused.deny == ("web",) and refused.remove == ("web_fetch", "web_search")
    assert tool_rules([], [], "Read,WebFetch").only == ("read_file", "web_fetch")
    with pytest.raises(UsageError, match="WebFetch\\(domain:HOST\\)"):
        tool_rules(["WebFetch(https://x/*)"], [])


def test_the_typescript_sdks_flags_are_honoured_or_refused() -> None:
    args, notes = screen_argv(
        [
            "--output-format",
            "stream-json",
            "--await-initialize",
            "--initialize-fields",
            "settings,disallowedTools",
            "--managed-settings-in-initialize",
            "--allow-dangerously-skip-permissions",
            "--debug-to-stderr",
        ]
    )
    assert args == ["--output-format", "stream-json", "--await-initialize", "--debug"] and notes == []
    for flag, said in (
        (["--agent", "reviewer"], "--agent: fugu has no agent definitions"),
        (["--no-session-persistence"], "--no-session-persistence: fugu records every session"),
        (["--managed-settings", "{}"], "--managed-settings: fugu reads .fugu/config.toml"),
        (["--plugin-dir-no-mcp", "/p"], "--plugin-dir-no-mcp: fugu has no plugins"),
        (["--channels", "x"], "--channels"),
        (["--sdk-url", "ws://x"], "--sdk-url"),
        (["--project-config-root", "/r"], "--project-config-root"),
    ):
        with pytest.raises(UsageError, match=said):
            screen_argv(["-p", "x", *flag])
