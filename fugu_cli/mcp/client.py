"""The only module that imports the `mcp` SDK: connecting to one server (stdio through fugu's sandbox,
streamable HTTP, or SSE), listing what it offers and turning its answers into text.

A stdio server is started with `sandbox.spawn` (its own minimal environment plus its config's `env`, never
fugu's; the repository as its working directory; what its command needs kept readable, reach.py) and
spoken to over asyncio pipes; everything here runs on the manager's event loop thread, which must outlive
the server (bwrap dies with the thread that started it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, Any

from fugu_cli import __version__
from fugu_cli.extension_config import ServerSpec
from fugu_cli.mcp import framing, reach
from fugu_cli.mcp.catalog import Catalog, PromptArg, PromptInfo, ResourceInfo, ToolInfo
from fugu_cli.tools.sandbox import SandboxPolicy, kill_tree, spawn

log = logging.getLogger("fugu.mcp")
_EXIT_GRACE_S = 2.0  # after stdin closes, as the MCP spec asks, before the server is killed


class CallTimedOut(Exception):
    """A request the server did not answer within its timeout (not a builtin TimeoutError, which
    concurrent.futures takes for its own)."""


def open_client(
    spec: ServerSpec,
    root: Path,
    policy: SandboxPolicy,
    stderr: IO[bytes] | None,
    on_exit: Callable[[int | None], None],
) -> AbstractAsyncContextManager[Any]:
    """An `mcp.Client` for `spec`, entered with `async with`. `on_exit` hears that a stdio server's output
    ended (it exited or closed stdout) with its exit code, if known."""
    from mcp import Client
    from mcp_types import Implementation

    transport: Any
    if spec.transport == "stdio":
        transport = _stdio(spec, root, policy, stderr, on_exit)
    elif spec.transport == "sse":
        from mcp.client.sse import sse_client

        transport = sse_client(spec.url or "", headers=dict(spec.headers), timeout=spec.startup_timeout_s)
    else:
        transport = _http(spec)
    client: AbstractAsyncContextManager[Any] = Client(
        transport,
        client_info=Implementation(name="fugu", version=__version__),
        read_timeout_seconds=spec.tool_timeout_s,
        cache=None,
    )
    return client


@asynccontextmanager
async def _http(spec: ServerSpec) -> AsyncIterator[Any]:
    import httpx2  # the HTTP client the SDK's transport takes (its public way to set headers)
    from mcp.client.streamable_http import streamable_http_client

    # the SDK's own defaults for its transports: 30 s, and 300 s to read a stream a server holds open
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=dict(spec.headers), timeout=timeout) as http,
        streamable_http_client(spec.url or "", http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def _stdio(
    spec: ServerSpec,
    root: Path,
    policy: SandboxPolicy,
    stderr: IO[bytes] | None,
    on_exit: Callable[[int | None], None],
) -> AsyncIterator[Any]:
    import anyio
    import mcp_types as types
    from mcp.shared.message import SessionMessage

    server_policy = SandboxPolicy(
        mode=policy.mode,
        allow_network=spec.network,
        pass_env=(),  # the server's environment is its config's `env`, not what the user passes commands
        writable=(*policy.writable, *spec.writable),
        hide=policy.hide,
    )
    argv = reach.npx_cached([spec.command or "", *spec.args], spec.env)
    proc, _ = spawn(
        argv,
        cwd=root,
        policy=server_policy,
        env=dict(spec.env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr if stderr is not None else subprocess.DEVNULL,
        readable=reach.readable(argv, spec.env, root),
    )
    if stderr is not None:
        stderr.close()  # the server holds its own copy; once it exits, the reader sees the end
    assert proc.stdout is not None and proc.stdin is not None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    read_pipe, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), proc.stdout)
    write_pipe, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
    inbound_send, inbound = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound, outbound_recv = anyio.create_memory_object_stream[SessionMessage](0)
    in_flight: set[Any] = (
        set()
    )  # ids of our requests not answered yet (an oversized answer is matched to one)

    limit = framing.MAX_MESSAGE

    def parse(data: bytearray | framing.TooLong) -> Any:
        if isinstance(data, framing.TooLong):
            error = data.error(in_flight, limit)
            log.warning("%s wrote a %d-byte message; it was dropped", spec.name, data.size)
            return None if error is None else types.jsonrpc_message_adapter.validate_python(error)
        try:
            return types.jsonrpc_message_adapter.validate_python(json.loads(data), by_name=False)
        except ValueError:
            if data.strip():
                log.debug("%s wrote a line that is not JSON-RPC: %.200s", spec.name, bytes(data[:200]))
            return None

    async def from_server() -> None:
        async with inbound_send:
            try:
                async for data in framing.read_messages(reader, limit):
                    message = parse(data)
                    if message is None:
                        continue
                    if getattr(message, "method", None) is None:
                        in_flight.discard(getattr(message, "id", None))
                    try:
                        await inbound_send.send(SessionMessage(message))
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return
            except OSError:
                pass
        on_exit(proc.poll())

    async def to_server() -> None:
        async with outbound_recv:
            async for item in outbound_recv:
                if (
                    getattr(item.message, "method", None) is not None
                    and getattr(item.message, "id", None) is not None
                ):
                    in_flight.add(item.message.id)
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                if write_pipe.is_closing():
                    break
                write_pipe.write(data.encode())

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(from_server)
        tasks.start_soon(to_server)
        try:
            yield inbound, outbound
        finally:
            with anyio.CancelScope(shield=True):
                write_pipe.close()
                waited = 0.0
                while proc.poll() is None and waited < _EXIT_GRACE_S:
                    await asyncio.sleep(0.02)
                    waited += 0.02
                kill_tree(proc)
                read_pipe.close()
            tasks.cancel_scope.cancel()


async def list_catalog(client: Any) -> Catalog:
    """Everything the server offers (each list paged through); prompts and resources only if it has them."""
    caps = client.server_capabilities
    tools = [_tool(t) for t in await _pages(client.list_tools)]
    prompts: list[PromptInfo] = []
    resources: list[ResourceInfo] = []
    if getattr(caps, "prompts", None) is not None:
        try:
            prompts = [_prompt(p) for p in await _pages(client.list_prompts)]
        except Exception as e:  # a server that claims prompts and fails to list them still has its tools
            log.info("listing the prompts of an MCP server failed: %s", e, exc_info=e)
    if getattr(caps, "resources", None) is not None:
        try:
            resources = [_resource(r) for r in await _pages(client.list_resources)]
        except Exception as e:
            log.info("listing the resources of an MCP server failed: %s", e, exc_info=e)
    return Catalog(tuple(tools), tuple(prompts), tuple(resources))


async def _pages(method: Any) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        page = await method(cursor=cursor)
        items += list(getattr(page, "tools", None) or getattr(page, "prompts", None) or [])
        items += list(getattr(page, "resources", None) or [])
        cursor = getattr(page, "next_cursor", None)
        if not cursor:
            break
    return items


def _tool(t: Any) -> ToolInfo:
    annotations = getattr(t, "annotations", None)
    read_only = bool(getattr(annotations, "read_only_hint", False))
    schema = getattr(t, "input_schema", None) or {}
    return ToolInfo(t.name, t.description or t.title or "", dict(schema), read_only)


def _prompt(p: Any) -> PromptInfo:
    args = tuple(PromptArg(a.name, a.description or "", bool(a.required)) for a in p.arguments or ())
    return PromptInfo(p.name, p.description or "", args)


def _resource(r: Any) -> ResourceInfo:
    return ResourceInfo(str(r.uri), r.name or "", r.mime_type or "")


async def call_tool(
    client: Any, tool: str, arguments: dict[str, Any], timeout_s: float
) -> tuple[str, bool, list[tuple[str, str]]]:
    """(text for the model, is_error, images as (media type, base64)) of one tool call; CallTimedOut if the
    server did not answer in time."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import REQUEST_TIMEOUT

    try:
        result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout_s)
    except MCPError as e:
        if e.code == REQUEST_TIMEOUT:
            raise CallTimedOut(tool) from None
        raise
    blocks = list(getattr(result, "content", None) or ())
    images = [(str(b.mime_type), str(b.data)) for b in blocks if _sendable_image(b)]
    parts = ["[image: attached below]" if _sendable_image(b) else _block_text(b) for b in blocks]
    text = "\n".join(p for p in parts if p)
    structured = getattr(result, "structured_content", None)
    if not text and structured is not None:
        text = json.dumps(structured, ensure_ascii=False, indent=2)
    return text or "(no output)", bool(getattr(result, "is_error", False)), images


def _sendable_image(block: Any) -> bool:
    """An image block a worker can be shown: a picture type providers take, small enough to send."""
    mime = getattr(block, "mime_type", "") or ""
    data = getattr(block, "data", "") or ""
    sendable = ("image/png", "image/jpeg", "image/gif", "image/webp")
    return getattr(block, "type", "") == "image" and mime in sendable and 0 < len(data) <= MAX_IMAGE_B64


async def get_prompt(client: Any, name: str, arguments: dict[str, str]) -> str:
    result = await client.get_prompt(name, arguments)
    texts = [_block_text(m.content) for m in result.messages]
    return "\n\n".join(t for t in texts if t)


async def read_resource(client: Any, uri: str) -> str:
    result = await client.read_resource(uri)
    return "\n".join(_contents_text(c) for c in result.contents)


MAX_IMAGE_B64 = 7 * 1024 * 1024  # base64 of 5 MiB, the most a provider takes for one image


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        size = len(base64.b64decode(block.data or "", validate=False)) if block.data else 0
        return f"[{kind} {getattr(block, 'mime_type', '')}, {size} bytes: not shown]"
    if kind == "resource_link":
        return f"[resource {block.uri}" + (f" ({block.name})]" if block.name else "]")
    if kind == "resource":
        return _contents_text(block.resource)
    return ""


def _contents_text(c: Any) -> str:
    if hasattr(c, "text"):
        return str(c.text)
    size = len(base64.b64decode(getattr(c, "blob", "") or "", validate=False))
    return f"[binary {getattr(c, 'mime_type', '') or 'data'} at {c.uri}, {size} bytes: not shown]"
