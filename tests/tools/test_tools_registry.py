"""The registry: schemas the models see, malformed calls as error results, and the permission gate."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fugu_cli.tools import Answer, ApprovalRequest, PermissionPolicy, ToolContext
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import ToolCall, ToolResult

Call = Callable[..., ToolResult]

EXPECTED = {
    "read_file": ("read", {"path"}, {"start_line", "end_line", "offset", "limit"}),
    "glob": ("read", {"pattern"}, set()),
    "grep": ("read", {"pattern"}, {"path"}),
    "edit_file": ("edit", {"path", "old_text", "new_text"}, set()),
    "write_file": ("edit", {"path", "content"}, set()),
    "shell": ("exec", {"command"}, {"timeout_s", "background"}),
    "shell_output": ("read", {"shell_id"}, {"wait_s"}),
    "shell_kill": ("read", {"shell_id"}, set()),
    "git_status": ("read", set(), set()),
    "git_diff": ("read", set(), {"path"}),
    "git_log": ("read", set(), {"n"}),
    "git_commit": ("exec", {"message"}, set()),
    "task": ("read", {"description", "prompt"}, {"subagent_type"}),
    "exit_plan_mode": ("read", {"plan"}, set()),
    "todo_write": ("read", {"todos"}, set()),
    "web_fetch": ("web", {"url"}, {"prompt"}),
}


def test_schemas_names_and_kinds() -> None:
    registry = ToolRegistry.default()
    assert sorted(registry.names()) == sorted(EXPECTED)
    for schema in registry.schemas():
        assert schema["type"] == "function"
        fn = schema["function"]
        kind, required, optional = EXPECTED[fn["name"]]
        assert registry.kind(fn["name"]) == kind
        params = fn["parameters"]
        assert set(params["required"]) == required
        assert set(params["properties"]) == required | optional
        assert len(fn["description"]) > 30
        for prop in params["properties"].values():
            assert prop["type"] in {"string", "integer", "number", "boolean", "array"}
            assert len(prop["description"]) > 10
    json.dumps(registry.schemas())


def test_schema_types_follow_signatures() -> None:
    props = {
        s["function"]["name"]: s["function"]["parameters"]["properties"]
        for s in ToolRegistry.default().schemas()
    }
    assert props["read_file"]["start_line"]["type"] == "integer"
    assert props["shell"]["timeout_s"]["type"] == "number"
    assert props["edit_file"]["old_text"]["type"] == "string"


def test_subset_and_read_only() -> None:
    registry = ToolRegistry.default()
    sub = registry.subset(["read_file", "glob"])
    assert sub.names() == ["read_file", "glob"]
    assert [s["function"]["name"] for s in sub.schemas()] == ["read_file", "glob"]
    reads = registry.subset([n for n in registry.names() if registry.kind(n) == "read"])
    assert "shell" not in reads.names() and "read_file" in reads.names()
    with pytest.raises(ValueError, match="nope"):
        registry.subset(["nope"])


def test_subset_refuses_tools_it_lacks(make_ctx: Callable[..., ToolContext]) -> None:
    sub = ToolRegistry.default().subset(["read_file", "glob"])
    result = sub.run(ToolCall("x", "shell", '{"command": "true"}'), make_ctx())
    assert result.is_error
    assert "Unknown tool 'shell'" in result.content
    assert "read_file, glob" in result.content


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("read_file", "{not json", "not valid JSON"),
        ("read_file", "[1, 2]", "must be a JSON object"),
        ("read_file", "{}", "missing required argument(s) path"),
        ("read_file", '{"path": "README.md", "colour": 1}', "unknown argument(s) colour"),
        ("read_file", '{"path": 12}', "path must be a JSON string"),
        ("read_file", '{"path": "README.md", "start_line": "two"}', "start_line must be a JSON integer"),
        ("read_file", '{"path": "README.md", "start_line": true}', "start_line must be a JSON integer"),
        ("shell", '{"command": ["ls"]}', "command must be a JSON string"),
        ("frobnicate", "{}", "Unknown tool 'frobnicate'. Available tools: read_file"),
    ],
)
def test_malformed_calls_become_error_results(
    make_ctx: Callable[..., ToolContext], name: str, arguments: str, needle: str
) -> None:
    result = ToolRegistry.default().run(ToolCall("c9", name, arguments), make_ctx())
    assert result.is_error
    assert result.call_id == "c9"
    assert result.name == name
    assert needle in result.content
    assert not result.denied


def test_lenient_where_unambiguous(call: Call) -> None:
    assert call("read_file", path="README.md", start_line=1.0, end_line=None).content == "     1\t# demo"
    assert not call("shell", command="true", timeout_s=5).is_error


def test_exception_inside_tool_is_a_result(repo: Path, call: Call) -> None:
    # README.md is a file, so creating README.md/x.txt raises inside the tool (an OSError, not a FuguError)
    result = call("write_file", path="README.md/x.txt", content="y")
    assert result.is_error and not result.denied
    assert result.content.startswith("Error: write_file failed:")
    assert (repo / "README.md").read_text() == "# demo\n"


def test_result_records_duration_exit_code_and_files(call: Call) -> None:
    shell = call("shell", command="exit 7")
    assert shell.exit_code == 7
    assert shell.duration_ms > 0
    write = call("write_file", path="docs/new.md", content="hi\n")
    assert write.files_touched == ("docs/new.md",)
    assert write.exit_code is None


# --- permissions ---------------------------------------------------------------------------------------


def test_read_only_refuses_writes_and_commands(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    ctx = make_ctx("read-only")
    write = call("write_file", ctx=ctx, path="new.txt", content="x")
    assert write.denied and write.is_error
    assert write.content.startswith("Permission denied: create new.txt")
    assert "--permission-mode auto-edit|full-auto" in write.content
    assert not (repo / "new.txt").exists()
    shell = call("shell", ctx=ctx, command="touch made.txt")
    assert shell.denied and not (repo / "made.txt").exists()
    assert call("git_commit", ctx=ctx, message="m").denied is False  # clean tree: error before asking
    assert not call("read_file", ctx=ctx, path="README.md").is_error


def test_ask_without_approver_is_denied(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    result = call("edit_file", ctx=make_ctx("ask"), path="README.md", old_text="demo", new_text="x")
    assert result.denied
    assert "no terminal to ask" in result.content
    assert (repo / "README.md").read_text() == "# demo\n"


def test_auto_edit_allows_edits_but_not_shell(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    ctx = make_ctx("auto-edit")
    assert not call("edit_file", ctx=ctx, path="README.md", old_text="demo", new_text="demo2").is_error
    assert (repo / "README.md").read_text() == "# demo2\n"
    shell = call("shell", ctx=ctx, command="touch made.txt")
    assert shell.denied
    assert "full-auto" in shell.content
    assert not (repo / "made.txt").exists()


def test_full_auto_allows_all(repo: Path, call: Call) -> None:
    assert not call("shell", command="touch made.txt").is_error
    assert (repo / "made.txt").exists()
    assert not call("git_commit", message="add made").is_error


def test_deny_rule_wins_over_full_auto(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    ctx = make_ctx(policy=PermissionPolicy(mode="full-auto", deny=["shell:rm"]))
    result = call("shell", ctx=ctx, command="rm README.md")
    assert result.denied and (repo / "README.md").exists()
    chained = call("shell", ctx=ctx, command="echo ok && rm README.md")
    assert chained.denied and (repo / "README.md").exists()


class Approver:
    def __init__(self, answer: Answer, repo: Path) -> None:
        self.answer = answer
        self.repo = repo
        self.requests: list[ApprovalRequest] = []
        self.readme_at_ask: list[str] = []

    def __call__(self, request: ApprovalRequest) -> Answer:
        self.requests.append(request)
        self.readme_at_ask.append((self.repo / "README.md").read_text())
        return self.answer


def test_approver_yes_sees_diff_before_write(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    approver = Approver("yes", repo)
    ctx = make_ctx("ask", approve=approver)
    result = call("edit_file", ctx=ctx, path="README.md", old_text="# demo", new_text="# shiny")
    assert not result.is_error
    (request,) = approver.requests
    assert request.kind == "edit" and request.tool == "edit_file" and request.agent == "tester"
    assert request.prefix == "edit"
    assert request.summary == "edit README.md (+1 -1)"
    assert "-# demo" in request.detail and "+# shiny" in request.detail
    assert approver.readme_at_ask == ["# demo\n"]
    assert (repo / "README.md").read_text() == "# shiny\n"
    assert ctx.policy.allow == ()


def test_approver_no_declines(repo: Path, call: Call, make_ctx: Callable[..., ToolContext]) -> None:
    approver = Approver("no", repo)
    result = call("shell", ctx=make_ctx("ask", approve=approver), command="rm README.md")
    assert result.denied and result.is_error
    assert "the user declined shell: rm README.md" in result.content
    assert approver.requests[0].detail == "rm README.md"
    assert approver.requests[0].prefix == "shell:rm"
    assert (repo / "README.md").exists()


def test_approver_always_is_granted_to_whoever_owns_the_run(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    approver = Approver("always", repo)
    granted: list[str] = []
    ctx = make_ctx("ask", approve=approver, grant=granted.append)
    assert not call("shell", ctx=ctx, command="git status --short").is_error
    # the context is a value: the grant goes to its owner (the agent run, the session), which keeps it
    assert granted == ["shell:git status"] and ctx.policy.allow == ()
    later = dataclasses.replace(ctx, policy=ctx.policy.allowing(*granted))
    assert not call("shell", ctx=later, command="git status").is_error
    assert len(approver.requests) == 1
    approver.answer = "no"
    assert call("shell", ctx=later, command="git log -1").denied  # another git subcommand still asks
    assert len(approver.requests) == 2


def test_before_edit_runs_once_before_writes_only(
    repo: Path, call: Call, make_ctx: Callable[..., ToolContext]
) -> None:
    seen: list[str] = []
    ctx = make_ctx("auto-edit", before_edit=lambda: seen.append((repo / "README.md").read_text()))
    call("read_file", ctx=ctx, path="README.md")
    call("glob", ctx=ctx, pattern="*")
    assert seen == []
    call("shell", ctx=ctx, command="true")  # denied: nothing may be checkpointed for it
    assert seen == []
    call("write_file", ctx=ctx, path="README.md", content="new\n")
    assert seen == ["# demo\n"]
