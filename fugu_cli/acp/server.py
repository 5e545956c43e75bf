"""`fugu acp`'s agent: the Agent Client Protocol's methods on fugu Sessions built by the composition root.

initialize (no authentication), session/new and session/load (fugu's own sessions, resumed from the store),
session/list, session/prompt (the turn runs in a worker thread; its events stream out as updates),
session/cancel (the running step stops, the session stays), session modes for the permission modes and a
`worker` option (auto: the router). Uses only the Session's public methods; never prints to stdout (the
protocol owns it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acp import PROTOCOL_VERSION, RequestError
from acp.helpers import update_agent_thought_text, update_available_commands, update_current_mode
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    ResourceContentBlock,
    SessionCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TextContentBlock,
    TextResourceContents,
    UnstructuredCommandInput,
    Usage,
)

from fugu_cli import __version__
from fugu_cli.acp.bridge import Asker, Outbox
from fugu_cli.acp.updates import Translator, replay
from fugu_cli.errors import FuguError
from fugu_cli.events import Event
from fugu_cli.options import RunOptions
from fugu_cli.tools import Approver
from fugu_cli.turn_settings import Overrides
from fugu_cli.types import PERMISSION_MODES, Image, PermissionMode, TurnResult

if TYPE_CHECKING:
    from fugu_cli.session import Session

Build = Callable[[RunOptions, Approver], "Session"]
MODES: dict[PermissionMode, tuple[str, str]] = {
    "ask": ("Ask", "Edits and commands wait for your approval"),
    "auto-edit": ("Auto-edit", "Edits are made; commands wait for your approval"),
    "full-auto": ("Full auto", "Edits and commands run without asking"),
    "read-only": ("Read-only", "Every edit and command is refused"),
}
STOP_REASONS = {"success": "end_turn", "interrupted": "cancelled", "error_max_turns": "max_turn_requests"}


def build_session(opts: RunOptions, approver: Approver) -> Session:
    from fugu_cli.app import build_session as build

    return build(opts, approver=approver)


@dataclass
class _Live:
    """One open ACP session: fugu's Session, its approver and translator, the running turn's cancel flag."""

    session: Session
    asker: Asker
    translator: Translator
    mode: PermissionMode
    worker: str = "auto"
    running: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)  # ultra mode's steps emit from threads


class FuguAgent:
    """The ACP agent side. `base` holds the flags `fugu acp` was started with; each session runs in the cwd
    its client names."""

    def __init__(self, base: RunOptions, build: Build = build_session) -> None:
        self._base = base
        self._build = build
        self._live: dict[str, _Live] = {}
        self._client: Any = None
        self._outbox: Outbox | None = None

    def on_connect(self, conn: Any) -> None:
        self._client = conn
        self._outbox = Outbox(asyncio.get_running_loop(), conn)

    @property
    def outbox(self) -> Outbox:
        assert self._outbox is not None, "on_connect comes first"
        return self._outbox

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True, image=True),
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
            ),
            auth_methods=[],
            agent_info=Implementation(name="fugu", title="fugu", version=__version__),
        )

    async def authenticate(self, method_id: str, **_: Any) -> None:
        return None

    async def new_session(
        self, cwd: str, mcp_servers: Sequence[Any] | None = None, **_: Any
    ) -> NewSessionResponse:
        live = await self._open(cwd, mcp_servers, resume=None)
        self._commands(live)
        return NewSessionResponse(
            session_id=live.session.id, modes=_modes(live.mode), config_options=self._options(live)
        )

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: Sequence[Any] | None = None, **_: Any
    ) -> LoadSessionResponse:
        live = await self._open(cwd, mcp_servers, resume=session_id)
        for update in replay(live.session.messages):
            self.outbox.note(live.session.id, update)
        self._commands(live)
        await self.outbox.flush()
        return LoadSessionResponse(modes=_modes(live.mode), config_options=self._options(live))

    async def list_sessions(self, cwd: str | None = None, **_: Any) -> ListSessionsResponse:
        from fugu_cli.app import open_store, repo_root

        here = str(repo_root(Path(cwd))) if cwd else None
        rows = [r for r in open_store().list_sessions(100) if here is None or r.cwd == here]
        return ListSessionsResponse(
            sessions=[
                SessionInfo(
                    session_id=r.id,
                    cwd=r.cwd,
                    title=r.title or None,
                    updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.updated_at)),
                )
                for r in rows
            ]
        )

    async def set_session_mode(self, mode_id: str, session_id: str, **_: Any) -> SetSessionModeResponse:
        live = self._get(session_id)
        if mode_id not in PERMISSION_MODES:
            raise RequestError.invalid_params({"details": f"no mode {mode_id!r}; fugu's: {list(MODES)}"})
        mode: PermissionMode = mode_id  # type: ignore[assignment]
        live.session.set_permission_mode(mode)
        live.mode = mode
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **_: Any
    ) -> SetSessionConfigOptionResponse:
        live = self._get(session_id)
        if config_id == "mode":
            await self.set_session_mode(str(value), session_id)
            self.outbox.note(session_id, update_current_mode(str(value)))
        elif config_id == "worker":
            try:
                live.session.set_worker(None if value == "auto" else str(value))
            except FuguError as e:
                raise RequestError.invalid_params({"details": str(e)}) from None
            live.worker = str(value)
        else:
            raise RequestError.invalid_params({"details": f"no option {config_id!r}; fugu's: mode, worker"})
        return SetSessionConfigOptionResponse(config_options=self._options(live))

    async def prompt(self, prompt: Sequence[Any], session_id: str, **_: Any) -> PromptResponse:
        live = self._get(session_id)
        if live.running is not None:
            raise RequestError.invalid_request({"details": "a prompt is already running in this session"})
        images = prompt_images(prompt)
        text = prompt_text(prompt, pictures=bool(images))
        cancel = threading.Event()
        live.running = live.asker.cancel = cancel
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                None, self._turn, live, text, cancel, images
            )
        except FuguError as e:  # e.g. a custom command whose worker is not in the pool
            raise RequestError.invalid_params({"details": str(e)}) from None
        finally:
            live.running = None
        await self.outbox.flush()
        if result.status == "error_during_execution" or result.status == "error_max_budget":
            self.outbox.note(session_id, _message(f"fugu: {result.error or result.result}"))
            await self.outbox.flush()
        u = result.usage
        usage = Usage(
            total_tokens=u.prompt_tokens + u.completion_tokens,
            input_tokens=u.prompt_tokens,
            output_tokens=u.completion_tokens,
            cached_read_tokens=u.cached_tokens,
        )
        return PromptResponse(
            stop_reason=STOP_REASONS.get(result.status, "end_turn"),  # type: ignore[arg-type]
            usage=usage,
            field_meta={"fugu": {"status": result.status, "cost_usd": round(u.cost_usd, 8)}},
        )

    async def cancel(self, session_id: str, **_: Any) -> None:
        live = self._live.get(session_id)
        if live is not None and live.running is not None:
            live.running.set()

    def close(self) -> None:
        """End every session's processes (MCP servers); their records stay in the store."""
        for live in self._live.values():
            live.session.close()

    # ---------------------------------------------------------------------------------------------------

    def _turn(
        self, live: _Live, text: str, cancel: threading.Event, images: Sequence[Image] = ()
    ) -> TurnResult:
        """One turn; a prompt that is a custom command or an MCP prompt (`/fix-issue 12`) runs as its
        prompt, with its worker and allowed tools, as in the REPL and stream-json."""
        from fugu_cli.ui.commands import parse
        from fugu_cli.ui.custom import attach_resources, resolve

        session, sid = live.session, live.session.id
        parsed = parse(text.strip())
        prompted = resolve(session, *parsed) if parsed is not None else None
        worker, allow = (prompted.worker, prompted.allow) if prompted is not None else (None, ())
        for note in prompted.notes if prompted is not None else ():
            self.outbox.note(sid, update_agent_thought_text(note + "\n"))
        text, _ = attach_resources(prompted.prompt if prompted is not None else text, session)

        def emit(event: Event) -> None:
            with live.lock:
                live.asker.see(event)
                for update in live.translator.updates(event):
                    self.outbox.note(sid, update)

        overrides = Overrides(worker, tuple(allow)) if prompted is not None else None
        return session.run_turn(text, emit, cancel, stream=True, overrides=overrides, images=images)

    def _commands(self, live: _Live) -> None:
        """Tell the client the custom commands and MCP prompts it can offer after `/`."""
        from fugu_cli.ui.custom import described

        commands = [
            AvailableCommand(
                name=name,
                description=help or name,
                input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)) if hint else None,
            )
            for name, help, hint in described(live.session.config.root, live.session)
        ]
        if commands:
            self.outbox.note(live.session.id, update_available_commands(commands))

    async def _open(self, cwd: str, servers: Sequence[Any] | None, resume: str | None) -> _Live:
        opts = dataclasses.replace(
            self._base,
            cwd=Path(cwd),
            resume=resume,
            mcp_config=(*self._base.mcp_config, *_mcp_config(servers or ())),
        )
        root = Path(cwd)
        translator = Translator(root)
        asker = Asker(self.outbox, translator)
        loop = asyncio.get_running_loop()
        try:
            session = await loop.run_in_executor(None, self._build, opts, asker)
        except FuguError as e:
            raise RequestError.invalid_params({"details": str(e)}) from None
        translator.root = session.config.root
        asker.session_id = session.id
        mode: PermissionMode = opts.permission_mode or "ask"
        live = _Live(session, asker, translator, mode, worker=opts.worker or "auto")
        self._live[session.id] = live
        return live

    def _get(self, session_id: str) -> _Live:
        live = self._live.get(session_id)
        if live is None:
            raise RequestError.invalid_params({"details": f"no open session {session_id!r}"})
        return live

    def _options(self, live: _Live) -> list[Any]:
        workers = [SessionConfigSelectOption(value="auto", name="auto", description="the router picks")]
        workers += [
            SessionConfigSelectOption(value=name, name=name, description=w.description or w.model)
            for name, w in live.session.workers.items()
        ]
        modes = [SessionConfigSelectOption(value=m, name=n, description=d) for m, (n, d) in MODES.items()]
        return [
            SessionConfigOptionSelect(
                id="mode", name="Permission mode", type="select", current_value=live.mode, options=modes
            ),
            SessionConfigOptionSelect(
                id="worker",
                name="Worker",
                description="Who takes every step (auto: the router picks per step)",
                type="select",
                current_value=live.worker,
                options=workers,
            ),
        ]


def prompt_images(blocks: Sequence[Any]) -> list[Image]:
    """The prompt's pictures (an editor's pasted screenshot); one fugu cannot send is an invalid prompt."""
    import base64
    import binascii

    from fugu_cli.tools.images import NotAnImage, image_of

    images: list[Image] = []
    for block in blocks:
        if isinstance(block, ImageContentBlock):
            try:
                images.append(
                    image_of(base64.b64decode(block.data, validate=True), block.uri or "pasted image")
                )
            except (binascii.Error, NotAnImage) as e:
                raise RequestError.invalid_params({"details": f"an image of the prompt: {e}"}) from None
    return images


def prompt_text(blocks: Sequence[Any], *, pictures: bool = False) -> str:
    """The prompt's text: its text blocks, and embedded text resources (an editor's selection or file); it
    may be empty when the prompt has `pictures`."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResourceContentBlock) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(
                f"<resource uri={json.dumps(block.resource.uri)}>\n{block.resource.text}\n</resource>"
            )
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"(see {block.uri})")
    text = "\n\n".join(p for p in parts if p)
    if not text.strip() and not pictures:
        raise RequestError.invalid_params({"details": "the prompt has no text fugu can read"})
    return text


def _modes(current: PermissionMode) -> SessionModeState:
    return SessionModeState(
        current_mode_id=current,
        available_modes=[SessionMode(id=m, name=n, description=d) for m, (n, d) in MODES.items()],
    )


def _message(text: str) -> Any:
    from acp import update_agent_message_text

    return update_agent_message_text(text)


def _mcp_config(servers: Sequence[Any]) -> tuple[str, ...]:
    """The client's MCP servers in `--mcp-config`'s shape (stdio and HTTP; others are skipped)."""
    table: dict[str, dict[str, Any]] = {}
    for s in servers:
        data = s.model_dump(by_alias=True, exclude_none=True)
        name = data.get("name")
        if not name:
            continue
        if "command" in data:
            env = {e["name"]: e["value"] for e in data.get("env", [])}
            table[name] = {"command": data["command"], "args": data.get("args", []), "env": env}
        elif "url" in data and data.get("type") in ("http", "sse"):
            headers = {h["name"]: h["value"] for h in data.get("headers", [])}
            table[name] = {"type": data["type"], "url": data["url"], "headers": headers}
    return (json.dumps({"mcpServers": table}),) if table else ()
