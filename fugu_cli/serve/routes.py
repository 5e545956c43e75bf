"""The HTTP routes of `fugu serve` as starlette endpoints: the model list and chat completions (pass-through
or agent; the Responses API is resp_routes.py). Each parses, hands the blocking work to a worker thread,
and answers in OpenAI's shape; errors too. Never blocks the event loop.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from fugu_cli.events import Event
from fugu_cli.serve.hub import Hub
from fugu_cli.serve.params import ChatRequest, parse_chat
from fugu_cli.serve.passthrough import Routed
from fugu_cli.serve.sse import EventStream, drain, from_thread, run_blocking, run_here, sse
from fugu_cli.serve.turns import Finished, Slot
from fugu_cli.serve.wire import (
    ApiError,
    Tracker,
    api_error,
    dropped_header,
    fugu_summary,
    model_object,
    new_id,
    now,
    outcome,
    usage_json,
)
from fugu_cli.types import Message

MAX_BODY = 16 * 1024 * 1024
MAX_DEPTH = 100  # JSON nesting; OpenAI request bodies with nested tool schemas stay far below
Endpoint = Callable[[Request], Awaitable[Response]]


def error_response(error: ApiError) -> JSONResponse:
    headers = dict(error.headers) | ({"www-authenticate": "Bearer"} if error.status == 401 else {})
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def openai_errors(endpoint: Endpoint) -> Endpoint:
    @functools.wraps(endpoint)
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as e:
            return error_response(api_error(e))

    return wrapped


def _hub(request: Request) -> Hub:
    hub: Hub = request.app.state.hub
    return hub


async def _blocking(request: Request, fn: Callable[[], Any], cancel: threading.Event | None = None) -> Any:
    return await run_blocking(request.receive, fn, cancel or threading.Event(), _hub(request).limiter)


async def read_json(request: Request) -> Any:
    """The request's JSON body: at most MAX_BODY bytes, arriving within the server's body timeout, nested at
    most MAX_DEPTH deep (deeper would exhaust the stack of whatever walks it)."""
    import asyncio
    import json

    size = 0
    parts: list[bytes] = []
    limit = _hub(request).options.body_timeout_s
    try:
        async with asyncio.timeout(limit):
            async for part in request.stream():
                size += len(part)
                if size > MAX_BODY:
                    raise ApiError(
                        413, f"the request body is over {MAX_BODY} bytes", code="request_too_large"
                    )
                parts.append(part)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {limit:g} s",
            code="request_timeout",
            headers={"Connection": "close"},
        ) from None
    too_deep = ApiError(
        400, f"the request body is nested deeper than {MAX_DEPTH} levels", code="invalid_json"
    )
    try:
        body = json.loads(b"".join(parts) or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    except RecursionError:
        raise too_deep from None
    if _deeper_than(body, MAX_DEPTH):
        raise too_deep
    return body


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests arrays and objects more than `limit` deep (walked without recursion)."""
    if not isinstance(value, (list, dict)):
        return False
    stack: list[tuple[Any, int]] = [(value, 0)]  # containers only: most values are strings and numbers
    while stack:
        item, depth = stack.pop()
        if depth >= limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (list, dict)):
                stack.append((child, depth + 1))
    return False


@openai_errors
async def list_models(request: Request) -> Response:
    ids = await _blocking(request, _hub(request).model_ids)
    return JSONResponse({"object": "list", "data": [model_object(i) for i in ids]})


@openai_errors
async def get_model(request: Request) -> Response:
    wanted = str(request.path_params["model"]).removeprefix("openai/")
    if wanted not in await _blocking(request, _hub(request).model_ids):
        raise ApiError(404, f"The model {wanted!r} does not exist", code="model_not_found", param="model")
    return JSONResponse(model_object(wanted))


@openai_errors
async def chat_completions(request: Request) -> Response:
    req = parse_chat(await read_json(request), request.headers.get("x-fugu-session"))
    if req.mode == "pass":
        return await _pass_chat(request, req)
    return await _agent_chat(request, req)


# the pass-through


async def _pass_chat(request: Request, req: ChatRequest) -> Response:
    if not req.stream:
        body, after = await pass_whole(request, req)
        return then(after, lambda: JSONResponse(body, headers={"x-fugu-session": body["fugu"]["session_id"]}))
    call, items, cancel, done, after = await pass_stream(request, req)
    chunks = _chat_chunks(req, call, items, done)
    headers = {"x-fugu-session": call.session.id}
    return EventStream(chunks, cancel, headers, after=after)  # type: ignore[return-value]


# what chat completions and the Responses API share: the blocking work started, and its cancel kept until
# it ends (a whole reply), or until the stream that relays it ends (`done`)


async def pass_whole(request: Request, req: ChatRequest) -> tuple[dict[str, Any], Callable[[], None]]:
    """The pass-through's whole chat.completion (with its `fugu` field), and what to call once it is sent:
    served from the event loop, the call's ledger rows are written then (`then`), not before the reply."""
    hub = _hub(request)
    made = hub.made_passthrough()
    with hub.running() as cancel:
        if made is not None and made.in_loop(req):  # no worker thread: about 1 ms less a call (BENCHMARKS.md)
            held = made.held()
            try:
                return await run_here(request.receive, made.acomplete(req, cancel, held), cancel), held.flush
            except BaseException:
                held.flush()
                raise
        body: dict[str, Any] = await _blocking(
            request, lambda: hub.passthrough().complete(req, cancel), cancel
        )
    return body, _nothing


def _nothing() -> None:
    return None


class _Then(Response):
    """A response, then `after` once it is sent (or failed to be). Only called, as starlette's routes do."""

    def __init__(self, response: Response, after: Callable[[], None]) -> None:
        self._response = response
        self._after = after

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._response(scope, receive, send)
        finally:
            self._after()


def then(after: Callable[[], None], respond: Callable[[], Response]) -> Response:
    """The response `respond` makes, with `after` called once it is sent; called at once if it cannot be
    made."""
    try:
        response = respond()
    except BaseException:
        after()
        raise
    return _Then(response, after)


async def pass_stream(
    request: Request, req: ChatRequest
) -> tuple[Routed, AsyncIterator[Any], threading.Event, Callable[[], None], Callable[[], None]]:
    """The pass-through's stream, opened (a worker sent its first chunk): the call, its chunks as they come,
    the request's cancel, `done` to call when the relay ends, and `after` to call once the response is sent
    (`EventStream`'s): served from the event loop, the call's rows are written then."""
    hub = _hub(request)
    made = hub.made_passthrough()
    cancel = hub.begin()
    if made is not None and made.in_loop(req):  # no worker threads between the worker and the client
        held = made.held()
        try:
            call, relay = await run_here(request.receive, made.astream(req, cancel, held), cancel)
        except BaseException:
            held.flush()
            hub.end(cancel)
            raise
        return call, relay, cancel, lambda: hub.end(cancel), held.flush
    try:
        call, chunks = await _blocking(request, lambda: hub.passthrough().stream(req, cancel), cancel)
    except BaseException:
        hub.end(cancel)
        raise
    items = from_thread(lambda put: drain(chunks, put, cancel), cancel, hub.limiter)
    return call, items, cancel, lambda: hub.end(cancel), _nothing


async def agent_whole(
    request: Request, slot: Slot, new: Sequence[Message], req: ChatRequest, tracker: Tracker
) -> Finished | None:
    """A whole agent turn of `slot`'s session (its events seen by `tracker`)."""
    hub = _hub(request)
    agents = await _blocking(request, hub.agents)
    with hub.running() as cancel:
        run = functools.partial(agents.run, slot, new, req, tracker.track, cancel)
        finished: Finished | None = await _blocking(request, run, cancel)
    return finished


async def agent_stream(
    request: Request, slot: Slot, new: Sequence[Message], req: ChatRequest
) -> tuple[AsyncIterator[Any], threading.Event, Callable[[], None]]:
    """An agent turn of `slot`'s session as it runs: its events, then its `Finished` (or None), the
    request's cancel, and `done` to call when the relay ends."""
    hub = _hub(request)
    agents = await _blocking(request, hub.agents)
    cancel = hub.begin()

    def produce(put: Callable[[Any], None]) -> None:
        put(agents.run(slot, new, req, put, cancel))

    return from_thread(produce, cancel, hub.limiter), cancel, lambda: hub.end(cancel)


async def _chat_chunks(
    req: ChatRequest, call: Routed, items: AsyncIterator[Any], done: Callable[[], None]
) -> AsyncIterator[bytes]:
    first = True
    try:
        async for chunk in items:
            chunk["model"] = req.model
            if not chunk["choices"]:  # the usage chunk, last: only for a client that asked for it
                if req.include_usage:
                    yield sse(chunk)
                continue
            if req.include_usage:
                chunk["usage"] = None
            if first:
                chunk["fugu"], first = call.fugu(), False
            yield sse(chunk)
        yield sse("[DONE]")
    except Exception as e:
        yield sse(api_error(e).body())
    finally:
        done()


# the agent


async def _agent_chat(request: Request, req: ChatRequest) -> Response:
    hub = _hub(request)
    agents = await _blocking(request, hub.agents)
    slot, new = await _blocking(request, lambda: agents.slot_for(req))
    if not req.stream:
        tracker = Tracker()
        finished = await agent_whole(request, slot, new, req, tracker)
        return _agent_reply(req, slot, finished, tracker)
    items, cancel, done = await agent_stream(request, slot, new, req)
    body = _agent_chunks(req, slot, items, done)
    headers = {"x-fugu-session": slot.session.id} | dropped_header(req.notes)
    return EventStream(body, cancel, headers)  # type: ignore[return-value]


def _agent_reply(req: ChatRequest, slot: Slot, finished: Finished | None, tracker: Tracker) -> Response:
    finish, error = outcome(finished.result if finished else None)
    headers = {"x-fugu-session": slot.session.id} | dropped_header(req.notes)
    headers |= {"x-fugu-replayed": "true"} if finished and finished.replayed else {}
    extra = _summary(finished, tracker)
    if error is not None:
        return JSONResponse(
            error.body() | {"fugu": extra}, status_code=error.status, headers=headers | error.headers
        )
    assert finished is not None
    message = {"role": "assistant", "content": finished.answer}
    body = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": now(),
        "model": req.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage_json(finished.result.usage),
        "fugu": extra,
    }
    return JSONResponse(body, headers=headers)


def _summary(finished: Finished | None, tracker: Tracker) -> dict[str, Any]:
    if finished is None:
        return {}
    return fugu_summary(finished.result, tracker.steps) | ({"replayed": True} if finished.replayed else {})


async def _agent_chunks(
    req: ChatRequest, slot: Slot, items: AsyncIterator[Any], done: Callable[[], None]
) -> AsyncIterator[bytes]:
    base = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": now(),
        "model": req.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        usage = {"usage": None} if req.include_usage else {}
        return sse(base | {"choices": [choice]} | usage | extra)

    tracker = Tracker()
    finished: Finished | None = None
    try:
        yield chunk({"role": "assistant", "content": ""})
        async for item in items:
            if isinstance(item, Event):
                text, fugu = tracker.see(item)
                # text goes out as it comes unless the answer is reshaped (response_format, stop) at the end
                if text and not (req.response_format or req.stop):
                    yield chunk({"content": text})
                elif fugu is not None:
                    yield chunk({"content": ""}, fugu=fugu)
            else:
                finished = item
        finish, error = outcome(finished.result if finished else None)
        extra = _summary(finished, tracker)
        if error is not None:
            yield sse(error.body() | {"fugu": extra})
            return
        assert finished is not None
        if finished.replayed or req.response_format or req.stop or not tracker.streamed:
            yield chunk({"content": finished.answer})
        yield chunk({}, finish, fugu=extra)
        if req.include_usage:
            yield sse(base | {"choices": [], "usage": usage_json(finished.result.usage)})
        yield sse("[DONE]")
    except Exception as e:
        yield sse(api_error(e).body())
    finally:
        done()


async def not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    if status == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
        return error_response(ApiError(405, message, code="method_not_allowed"))
    return error_response(ApiError(404, f"no route {request.method} {request.url.path}", code="not_found"))


def routes() -> list[Route]:
    out = []
    for prefix in ("/v1", ""):
        out += [
            Route(f"{prefix}/models", list_models, methods=["GET"]),
            Route(prefix + "/models/{model:path}", get_model, methods=["GET"]),
            Route(f"{prefix}/chat/completions", chat_completions, methods=["POST"]),
        ]
    return out
