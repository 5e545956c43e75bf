"""Between a turn's thread and the ACP connection's event loop: `Outbox` sends a session's updates in the
order the turn emitted them and carries permission questions to the client; `Asker` is the session's
`Approver` (the same seam the REPL's ask mode answers), asking with `session/request_permission`.

Never runs a turn and never blocks the event loop: the turn's thread waits, the loop only sends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from typing import Any

from acp import update_tool_call
from acp.schema import AllowedOutcome, PermissionOption, ToolCallUpdate

from fugu_cli.acp.updates import OPTIONS, Translator, Update, permission_options
from fugu_cli.events import Event, ToolStarted, unwrap
from fugu_cli.tools import Answer, ApprovalRequest

log = logging.getLogger("fugu")


@dataclass(frozen=True)
class _Note:
    session_id: str
    update: Update


@dataclass(frozen=True)
class _Ask:
    session_id: str
    tool_call: ToolCallUpdate
    options: list[PermissionOption]
    answer: concurrent.futures.Future[str | None]


@dataclass(frozen=True)
class _Mark:
    reached: asyncio.Future[None]


class Outbox:
    """One connection's outgoing updates and questions, in order. `note` and `ask` are called from turn
    threads; `flush` from the loop, after a turn, so its prompt is answered only once its updates are out."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: Any) -> None:
        self._loop = loop
        self._client = client  # the AgentSideConnection: session_update, request_permission
        self._queue: asyncio.Queue[_Note | _Ask | _Mark] = asyncio.Queue()
        self._asks: set[asyncio.Task[Any]] = set()
        self._pump = loop.create_task(self._run())

    def note(self, session_id: str, update: Update) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, _Note(session_id, update))

    def ask(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        cancel: threading.Event | None,
    ) -> str | None:
        """The option the client chose; None when it cancelled, failed, or the turn was cancelled first."""
        answer: concurrent.futures.Future[str | None] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, _Ask(session_id, tool_call, options, answer))
        while True:
            try:
                return answer.result(timeout=0.1)
            except concurrent.futures.TimeoutError:
                if cancel is not None and cancel.is_set():
                    return None

    async def flush(self) -> None:
        reached: asyncio.Future[None] = self._loop.create_future()
        self._queue.put_nowait(_Mark(reached))
        await reached

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            if isinstance(item, _Mark):
                item.reached.set_result(None)
            elif isinstance(item, _Note):
                try:
                    await self._client.session_update(session_id=item.session_id, update=item.update)
                except Exception as e:  # a client that went away: the turn goes on, its updates are lost
                    log.warning("ACP session/update failed", exc_info=e)
            else:
                task = self._loop.create_task(self._question(item))
                self._asks.add(task)
                task.add_done_callback(self._asks.discard)
                await asyncio.sleep(0)  # the request is written before any later update

    async def _question(self, item: _Ask) -> None:
        chosen: str | None = None
        try:
            response = await self._client.request_permission(
                session_id=item.session_id, tool_call=item.tool_call, options=item.options
            )
            if isinstance(response.outcome, AllowedOutcome):
                chosen = response.outcome.option_id
        except Exception as e:  # the client could not answer: a refusal
            log.warning("ACP session/request_permission failed", exc_info=e)
        if not item.answer.done():
            item.answer.set_result(chosen)


class Asker:
    """The `Approver` of one ACP session: before an edit or a command the policy would ask about, the client
    is asked (allow once, always, reject); a cancelled turn or question is a refusal the model reads."""

    def __init__(self, outbox: Outbox, translator: Translator) -> None:
        self.outbox = outbox
        self.translator = translator
        self.session_id = ""  # set once the session exists (its id is fugu's session id)
        self.cancel: threading.Event | None = None  # the running turn's
        self._here = threading.local()  # the call a turn thread is running (ToolStarted comes just before)

    def see(self, event: Event) -> None:
        event = unwrap(event)
        if isinstance(event, ToolStarted):
            self._here.call = event.call

    def __call__(self, request: ApprovalRequest) -> Answer:
        call = getattr(self._here, "call", None)
        tool_call = self.translator.permission_call(call, request)
        options = permission_options(request.prefix)
        chosen = self.outbox.ask(self.session_id, tool_call, options, self.cancel)
        answer = OPTIONS.get(chosen or "", "no")
        if answer != "no" and call is not None:
            self.outbox.note(self.session_id, update_tool_call(call.id, status="in_progress"))
        return answer
