"""The Responses API's HTTP routes: `POST /v1/responses` (the pass-through, or fugu's agent for `fugu-agent`,
`fugu-ultra` and `fugu/<worker>`), and a stored response's `GET`, `DELETE` and `input_items`. Each reads the
request, hands the blocking work to a worker thread, and answers in OpenAI's shape; what fugu could not
honour is named in the `x-fugu-dropped` header. Never blocks the event loop.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fugu_cli.errors import ProviderError
from fugu_cli.events import Event
from fugu_cli.serve.params import ChatRequest
from fugu_cli.serve.passthrough import Routed
from fugu_cli.serve.resp_events import ResponseEvents, envelope, response_from_chat, text_item, usage_of
from fugu_cli.serve.resp_store import owner_of
from fugu_cli.serve.responses import Asked, chat_request, read
from fugu_cli.serve.routes import (
    _blocking,
    _hub,
    agent_stream,
    agent_whole,
    openai_errors,
    pass_stream,
    pass_whole,
    read_json,
    then,
)
from fugu_cli.serve.sse import EventStream, sse
from fugu_cli.serve.turns import Finished, Slot, context
from fugu_cli.serve.wire import (
    ApiError,
    Tracker,
    api_error,
    dropped_header,
    fugu_summary,
    new_id,
    now,
    outcome,
    usage_json,
)


@openai_errors
async def create(request: Request) -> Response:
    hub = _hub(request)
    asked = read(await read_json(request))
    owner = owner_of(request.headers.get("authorization"))
    history, session = await _blocking(request, lambda: hub.book.history(asked.previous_id, owner))
    named = request.headers.get("x-fugu-session") or asked.body.get("session_id")
    if named and session and named != session:
        raise ApiError(
            400,
            f"previous_response_id {asked.previous_id} belongs to session {session}, not {named}",
            param="previous_response_id",
        )
    req = chat_request(asked, history, named or session)
    if req.mode == "pass":
        return await _pass(request, asked, req, owner)
    return await _agent(request, asked, req, owner, continued=bool(history))


# the pass-through


async def _pass(request: Request, asked: Asked, req: ChatRequest, owner: str) -> Response:
    hub = _hub(request)
    if not req.stream:
        reply, after = await pass_whole(request, req)
        try:
            body = response_from_chat(reply, asked.body, asked.tools)
            sid = reply["fugu"]["session_id"]
            await _blocking(request, lambda: hub.book.keep(asked, body, sid, owner))
        except BaseException:
            after()
            raise
        headers = {"x-fugu-session": sid} | dropped_header(reply["fugu"].get("dropped", ()))
        return then(after, lambda: JSONResponse(body, headers=headers))
    call, items, cancel, done, after = await pass_stream(request, req)
    try:
        events = ResponseEvents(asked.body, asked.tools)
        keep = functools.partial(hub.book.keep, asked, session_id=call.session.id, owner=owner)
        stream = _pass_events(events, call, items, keep, done)
        headers = {"x-fugu-session": call.session.id} | dropped_header(call.dropped)
    except BaseException:
        done()
        after()
        raise
    return EventStream(stream, cancel, headers, after=after)  # type: ignore[return-value]


async def _pass_events(
    events: ResponseEvents,
    call: Routed,
    items: AsyncIterator[Any],
    keep: Callable[[Mapping[str, Any]], None],
    done: Callable[[], None],
) -> AsyncIterator[bytes]:
    usage: dict[str, Any] | None = None
    try:
        for event in events.start(call.fugu()):
            yield sse(event, event["type"])
        async for chunk in items:
            if chunk.get("usage"):
                usage = chunk["usage"]
            for event in events.feed(chunk):
                yield sse(event, event["type"])
        finish = events.finish(usage, call.fugu())
        if events.final is not None:
            keep(events.final)
        for event in finish:
            yield sse(event, event["type"])
    except (ProviderError, ApiError) as e:
        failed = events.failed(api_error(e))
        yield sse(failed, failed["type"])
    finally:
        done()


# fugu's agent


async def _agent(request: Request, asked: Asked, req: ChatRequest, owner: str, continued: bool) -> Response:
    hub = _hub(request)
    agents = await _blocking(request, hub.agents)
    slot, new = await _blocking(request, lambda: agents.slot_for(req))
    if continued:  # previous_response_id: the session has the history; this request brings new items only
        new = context(req.messages[: _last_user(req.messages)])
    headers = {"x-fugu-session": slot.session.id} | dropped_header(req.notes)
    if not req.stream:
        tracker = Tracker()
        finished = await agent_whole(request, slot, new, req, tracker)
        body, error = _agent_response(asked, finished, tracker)
        if error is not None:
            payload = error.body() | {"fugu": body.get("fugu", {})}
            return JSONResponse(payload, error.status, headers | error.headers)
        await _blocking(request, lambda: hub.book.keep(asked, body, slot.session.id, owner))
        return JSONResponse(body, headers=headers | _replayed(finished))
    items, cancel, done = await agent_stream(request, slot, new, req)
    keep = functools.partial(hub.book.keep, asked, session_id=slot.session.id, owner=owner)
    stream = _agent_events(ResponseEvents(asked.body), req, slot, items, keep, done)
    return EventStream(stream, cancel, headers)  # type: ignore[return-value]


def _last_user(messages: tuple[dict[str, Any], ...]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))


def _replayed(finished: Finished | None) -> dict[str, str]:
    return {"x-fugu-replayed": "true"} if finished is not None and finished.replayed else {}


def _agent_response(
    asked: Asked, finished: Finished | None, tracker: Tracker
) -> tuple[dict[str, Any], ApiError | None]:
    finish, error = outcome(finished.result if finished else None)
    fugu = fugu_summary(finished.result, tracker.steps) if finished else {}
    out = envelope(asked.body, new_id("resp_"), now()) | {"fugu": fugu}
    if error is not None or finished is None:
        return out, error
    out["output"] = [text_item(new_id("msg_"), finished.answer)]
    out["usage"] = usage_of(usage_json(finished.result.usage))
    if finish == "length":
        return out | {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, None
    return out | {"status": "completed"}, None


async def _agent_events(
    events: ResponseEvents,
    req: ChatRequest,
    slot: Slot,
    items: AsyncIterator[Any],
    keep: Callable[[Mapping[str, Any]], None],
    done: Callable[[], None],
) -> AsyncIterator[bytes]:
    tracker = Tracker()
    finished: Finished | None = None
    reshaped = bool(req.response_format or req.stop)
    try:
        for event in events.start({"session_id": slot.session.id}):
            yield sse(event, event["type"])
        async for item in items:
            if not isinstance(item, Event):
                finished = item
                continue
            text, _ = tracker.see(item)
            if text and not reshaped:
                for event in events.text(text):
                    yield sse(event, event["type"])
        finish, error = outcome(finished.result if finished else None)
        if error is not None or finished is None:
            failed = events.failed(error or ApiError(503, "the turn was cancelled", "server_error"))
            yield sse(failed, failed["type"])
            return
        if finished.replayed or reshaped or not tracker.streamed:
            for event in events.text(finished.answer):
                yield sse(event, event["type"])
        events.finish_reason = finish
        fugu = fugu_summary(finished.result, tracker.steps)
        final = events.finish(usage_json(finished.result.usage), fugu)
        if events.final is not None:
            keep(events.final)
        for event in final:
            yield sse(event, event["type"])
    except Exception as e:
        failed = events.failed(api_error(e))
        yield sse(failed, failed["type"])
    finally:
        done()


# stored responses


@openai_errors
async def retrieve(request: Request) -> Response:
    hub = _hub(request)
    owner = owner_of(request.headers.get("authorization"))
    rid = str(request.path_params["rid"])
    found = await _blocking(request, lambda: hub.book.get(rid, owner))
    return JSONResponse(found.response)


@openai_errors
async def delete(request: Request) -> Response:
    hub = _hub(request)
    owner = owner_of(request.headers.get("authorization"))
    rid = str(request.path_params["rid"])
    await _blocking(request, lambda: hub.book.delete(rid, owner))
    return JSONResponse({"id": rid, "object": "response.deleted", "deleted": True})


@openai_errors
async def input_items(request: Request) -> Response:
    hub = _hub(request)
    owner = owner_of(request.headers.get("authorization"))
    rid = str(request.path_params["rid"])
    found = await _blocking(request, lambda: hub.book.get(rid, owner))
    data = [{"id": item.get("id") or new_id("item_")} | item for item in reversed(found.input)]
    body = {"object": "list", "data": data, "has_more": False}
    body |= {"first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}
    return JSONResponse(body)


def routes() -> list[Route]:
    out = []
    for prefix in ("/v1", ""):
        out += [
            Route(f"{prefix}/responses", create, methods=["POST"]),
            Route(prefix + "/responses/{rid}", retrieve, methods=["GET"]),
            Route(prefix + "/responses/{rid}", delete, methods=["DELETE"]),
            Route(prefix + "/responses/{rid}/input_items", input_items, methods=["GET"]),
        ]
    return out
