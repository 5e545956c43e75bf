"""The `initialize` control request as Claude's Agent SDKs send it (ui/initialize.py, ui/stream.py): every
field honoured as run options or refused with its reason; one that comes late may shape nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fugu_cli.errors import UsageError
from fugu_cli.options import RunOptions
from fugu_cli.ui.initialize import InitializeAsks, leading_initialize, read_initialize
from fugu_cli.ui.stream import Controls


def _controls(asks: InitializeAsks | None = None, folders: tuple[Path, ...] = ()) -> Controls:
    return Controls(
        models=list,
        interrupt=lambda: None,
        set_permission_mode=lambda _: None,
        set_model=lambda _: None,
        asks=asks,
        folders=folders,
    )


def test_the_typescript_sdks_fields_become_run_options(tmp_path: Path) -> None:
    request = {
        "subtype": "initialize",
        "systemPrompt": ["You are terse.", ""],
        "appendSystemPrompt": "Answer in French.",
        "mcpServers": {"time": {"command": "mcp-server-time", "args": []}},
        "disallowedTools": ["Bash(rm:*)"],
        "workspaceTrust": {"accepted": True, "directory": str(tmp_path)},
        "title": "nightly fix",
        "supportedDialogKinds": ["confirm"],
        "forwardSubagentText": True,
        "hooks": None,
        "agents": {},
    }
    asks = read_initialize(request, (tmp_path,))
    opts = asks.fold(RunOptions(cwd=tmp_path, append_system_prompt="Be kind."))
    assert (
        opts.system_prompt == "You are terse."
        and opts.append_system_prompt == "Be kind.\n\nAnswer in French."
    )
    assert json.loads(opts.mcp_config[-1]) == {"mcpServers": request["mcpServers"]}
    assert opts.trust_project and asks.disallowed_tools == ("Bash(rm:*)",) and asks.title == "nightly fix"
    assert asks.applied() == {"mcp_servers_applied": True, "disallowed_tools_applied": True}
    default = read_initialize({"subtype": "initialize", "systemPrompt": [""]}, (tmp_path,))
    assert default == InitializeAsks() and default.fold(RunOptions(cwd=tmp_path)).system_prompt is None


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("agents", {"reviewer": {"description": "d", "prompt": "p"}}, "fugu has no subagents"),
        ("hooks", {"PreToolUse": [{"hookCallbackIds": ["hook_0"]}]}, "fugu runs no SDK hook callbacks"),
        ("sdkMcpServers", ["calc"], "in-process SDK MCP servers"),
        ("jsonSchema", {"type": "object"}, "structured answer"),
        ("settings", {"model": "x"}, "not Claude Code's settings"),
        ("skills", ["pdf"], "no skills"),
        ("somethingNew", True, "does not know this field"),
        (
            "workspaceTrust",
            {"accepted": True, "directory": "/elsewhere"},
            "trust was accepted for /elsewhere",
        ),
    ],
)
def test_what_fugu_cannot_honour_is_refused(tmp_path: Path, field: str, value: object, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        read_initialize({"subtype": "initialize", field: value}, (tmp_path,))


def test_a_late_initialize_may_shape_nothing_and_a_second_is_refused(tmp_path: Path) -> None:
    late = _controls(folders=(tmp_path,))
    with pytest.raises(UsageError, match="came after the first user message"):
        late.answer({"subtype": "initialize", "systemPrompt": ["Be a pirate."]})
    plain = _controls(folders=(tmp_path,))
    assert "models" in plain.answer({"subtype": "initialize", "systemPrompt": [""]})
    with pytest.raises(UsageError, match="a second one"):
        plain.answer({"subtype": "initialize"})
    first = _controls(InitializeAsks(mcp_servers={"t": {}}), (tmp_path,))
    assert first.answer({"subtype": "initialize", "mcpServers": {"t": {}}})["mcp_servers_applied"] is True


def test_the_leading_lines_are_read_up_to_the_initialize() -> None:
    init = json.dumps({"type": "control_request", "request_id": "r1", "request": {"subtype": "initialize"}})
    user = json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}})
    lines = iter(["\n", user, init, user])
    head, request = leading_initialize(lines, wait=True, stopped=lambda: False)
    assert head == [user, init] and request is not None and request["request_id"] == "r1"
    assert list(lines) == [user]  # the rest is left for the inbox
    head, request = leading_initialize(iter([user, init]), wait=False, stopped=lambda: False)
    assert head == [user] and request is None
