"""`fugu acp` driven by the Agent Client Protocol SDK's own client side (`acp.spawn_agent_process`), as an
editor drives it: a real `fugu acp` process on stdio, loopback workers, a real git repository. Only the
workers' words are scripted; the client answers permission requests as a user would."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    ClientCapabilities,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)

from tests.helpers import BUGGY, FIXED, call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer


class Editor:
    """The client side: records every update, answers each permission request with the next choice."""

    def __init__(self, choices: list[str] | None = None) -> None:
        self.choices = list(choices or [])
        self.asked: list[Any] = []
        self.updates: list[Any] = []

    async def request_permission(self, options: Any, session_id: str, tool_call: Any, **_: Any) -> Any:
        self.asked.append((tool_call, [o.option_id for o in options]))
        choice = self.choices.pop(0)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=choice))

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        self.updates.append(update)

    def texts(self, kind: type[Any]) -> list[str]:
        return [u.content.text for u in self.updates if isinstance(u, kind)]

    def said(self) -> str:
        """The workers' text as the editor shows it (streamed chunks joined)."""
        return "".join(self.texts(AgentMessageChunk))


def _pool(tmp_path: Path, server: LoopbackServer) -> Path:
    workers = [{"name": "alpha", "model": "openai/alpha", "api_base": server.base_url, "price_in": 1.0}]
    return write_pool(tmp_path / "pool.toml", workers)


def _drive(editor: Editor, repo: Path, pool: Path, body: Callable[[Any], Awaitable[Any]]) -> Any:
    """Start `fugu acp` in `repo`, initialize, run `body(connection)`, close stdin."""

    async def run() -> Any:
        args = ("-m", "fugu_cli", "acp", "--pool", str(pool))
        async with spawn_agent_process(
            cast(Any, editor), sys.executable, *args, cwd=repo, env=dict(os.environ)
        ) as (
            conn,
            _process,
        ):
            init = await conn.initialize(
                protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
            )
            assert init.agent_capabilities is not None and init.agent_capabilities.load_session is True
            assert init.agent_info is not None and init.agent_info.name == "fugu"
            return await body(conn)

    return asyncio.run(asyncio.wait_for(run(), timeout=120))


def test_an_edit_granted_in_the_editor_changes_the_file_and_the_next_prompt_sees_the_first(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    edit = call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")
    loopback.script(
        "alpha",
        [tool_reply(edit), tool_reply(edit), "Fixed add().", "You asked me to fix add()."],
    )
    editor = Editor(["reject", "allow"])

    async def body(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(repo), mcp_servers=[])
        assert new.modes.current_mode_id == "ask"
        assert {o.id for o in new.config_options} == {"mode", "worker"}
        first = await conn.prompt(session_id=new.session_id, prompt=[text_block("fix add in calc.py")])
        second = await conn.prompt(session_id=new.session_id, prompt=[text_block("what did I ask?")])
        return new.session_id, first, second

    sid, first, second = _drive(editor, repo, _pool(tmp_path, loopback), body)

    assert (first.stop_reason, second.stop_reason) == ("end_turn", "end_turn")
    assert (repo / "calc.py").read_text() == FIXED
    # two questions: the first refused (the model read the refusal and asked again), the second allowed
    assert len(editor.asked) == 2
    tool_call, options = editor.asked[1]
    assert options == ["allow", "always", "reject"]
    assert tool_call.title == "edit calc.py (+1 -1)" and tool_call.kind == "edit"
    diff = tool_call.content[0]
    assert (diff.type, diff.old_text, diff.new_text) == ("diff", BUGGY, FIXED)
    assert diff.path == str((repo / "calc.py").resolve())
    starts = [u for u in editor.updates if isinstance(u, ToolCallStart)]
    assert [(s.kind, s.status, (s.locations or [])[0].path) for s in starts] == [
        ("edit", "pending", diff.path)
    ] * 2
    ends = [
        u for u in editor.updates if isinstance(u, ToolCallProgress) and u.status in ("completed", "failed")
    ]
    assert [e.status for e in ends] == ["failed", "completed"]
    assert any(c.type == "diff" and c.new_text == FIXED for c in ends[1].content or [])
    assert editor.said() == "Fixed add().You asked me to fix add()."
    thoughts = editor.texts(AgentThoughtChunk)
    assert sum(t.startswith("↳ step") and "alpha" in t for t in thoughts) == 4  # the router's pick per step
    assert first.field_meta["fugu"]["cost_usd"] > 0
    # the second prompt's request carries the first prompt and what came of it
    last = loopback.requests_for("alpha")[-1].messages
    assert any(m["role"] == "user" and "fix add in calc.py" in str(m["content"]) for m in last)
    assert any(m["role"] == "tool" for m in last)
    assert sid


def test_cancel_stops_a_slow_step_and_the_session_goes_on(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".fugu" / "commands").mkdir(parents=True)
    greet = "---\ndescription: Greet someone\nargument-hint: NAME\n---\nSay hello to $ARGUMENTS, briefly.\n"
    (repo / ".fugu" / "commands" / "greet.md").write_text(greet)
    loopback.script("alpha", [{"content": "too late", "delay_s": 60}, "Here after the cancel."])
    editor = Editor()

    async def body(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(repo), mcp_servers=[])
        slow = asyncio.create_task(
            conn.prompt(session_id=new.session_id, prompt=[text_block("take your time")])
        )
        while not loopback.requests_for("alpha"):
            await asyncio.sleep(0.05)
        await conn.cancel(session_id=new.session_id)
        cancelled = await slow
        after = await conn.prompt(session_id=new.session_id, prompt=[text_block("/greet Bob")])
        return cancelled, after

    cancelled, after = _drive(editor, repo, _pool(tmp_path, loopback), body)

    assert cancelled.stop_reason == "cancelled"
    assert after.stop_reason == "end_turn"
    assert editor.said() == "Here after the cancel."
    second = loopback.requests_for("alpha")[-1].messages
    assert any("take your time" in str(m["content"]) for m in second if m["role"] == "user")
    # the repository's custom command is offered after `/`, and `/greet Bob` runs as its prompt
    [offered] = [u for u in editor.updates if isinstance(u, AvailableCommandsUpdate)]
    assert [(c.name, c.input and c.input.root.hint) for c in offered.available_commands] == [
        ("greet", "NAME")
    ]
    assert [m["content"] for m in second if m["role"] == "user"][-1].startswith("Say hello to Bob, briefly.")


def test_load_resumes_a_saved_session_in_a_new_process(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    pool = _pool(tmp_path, loopback)
    loopback.script("alpha", ["Noted: 42.", "You told me 42."])

    async def first(conn: Any) -> str:
        new = await conn.new_session(cwd=str(repo), mcp_servers=[])
        await conn.prompt(session_id=new.session_id, prompt=[text_block("remember the number 42")])
        return str(new.session_id)

    sid = _drive(Editor(), repo, pool, first)
    editor = Editor()

    async def second(conn: Any) -> Any:
        listed = await conn.list_sessions(cwd=str(repo))
        loaded = await conn.load_session(cwd=str(repo), session_id=sid, mcp_servers=[])
        reply = await conn.prompt(session_id=sid, prompt=[text_block("which number?")])
        return listed, loaded, reply

    listed, loaded, reply = _drive(editor, repo, pool, second)

    assert sid in [s.session_id for s in listed.sessions]
    assert loaded.modes.current_mode_id == "ask"
    # the conversation so far is replayed (the client handles notifications as they come, so they are
    # read from everything it got): the user's message, then the worker's answer, before the new reply
    assert editor.texts(UserMessageChunk) == ["remember the number 42"]
    assert editor.said() == "Noted: 42.You told me 42."
    assert reply.stop_reason == "end_turn"
    messages = loopback.requests_for("alpha")[-1].messages
    assert [m["content"] for m in messages if m["role"] == "user"][:1] == ["remember the number 42"]
    assert any(m["role"] == "assistant" and m["content"] == "Noted: 42." for m in messages)


def test_a_file_for_stdout_is_a_clear_usage_error(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with out.open("w") as f:
        run = subprocess.run(
            [sys.executable, "-m", "fugu_cli", "acp"], input="", stdout=f, stderr=subprocess.PIPE, text=True
        )
    assert run.returncode == 2
    assert "fugu acp talks over pipes: its stdout is a file" in run.stderr
    assert out.read_text() == ""


def test_a_pasted_screenshot_reaches_the_worker_that_sees_it(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    import base64

    from acp import image_block

    repo = make_repo(tmp_path / "repo")
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    workers = [
        {"name": "alpha", "model": "openai/alpha", "api_base": loopback.base_url, "priority": 2},
        {
            "name": "seer",
            "model": "openai/seer",
            "api_base": loopback.base_url,
            "priority": 1,
            "vision": True,
        },
    ]
    loopback.script("seer", ["A red pixel."])

    async def body(conn: Any) -> Any:
        new = await conn.new_session(cwd=str(repo), mcp_servers=[])
        blocks = [text_block("what is wrong here?"), image_block(png, "image/png")]
        done = await conn.prompt(session_id=new.session_id, prompt=blocks)
        bad = [image_block(base64.b64encode(b"not a picture").decode(), "image/png")]
        try:
            await conn.prompt(session_id=new.session_id, prompt=bad)
        except Exception as e:  # the SDK raises the error response
            return done, f"{e} {getattr(e, 'data', '')}"
        return done, ""

    done, refused = _drive(Editor(), repo, write_pool(tmp_path / "pool.toml", workers), body)
    assert done.stop_reason == "end_turn"
    sent = loopback.requests_for("seer")[0].messages[-1]["content"]
    assert [p["type"] for p in sent] == ["text", "image_url"] and png in sent[1]["image_url"]["url"]
    assert loopback.requests_for("alpha") == []
    assert "is not a PNG, JPEG, GIF or WebP image" in refused
