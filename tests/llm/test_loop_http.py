"""The event loop's HTTP client (fugu_cli/llm/loop_http.py, serve's pass-through through `AsyncDirect`)
against a raw socket server on 127.0.0.1 that answers each request with scripted bytes: the replies real
servers send that the loopback provider does not (compressed, malformed, cut short, silent), kept-alive
connections the server closes, and a caller that gives up while it waits."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fugu_cli.llm.direct import AsyncDirect, DirectClient, HTTPStatusFault
from fugu_cli.llm.faults import classify
from fugu_cli.llm.loop_http import LoopHTTP, _split
from fugu_cli.llm.parse import WrongEndpoint
from fugu_cli.types import Worker
from tests.loopback import RawServer


@pytest.fixture
def raw() -> Iterator[Callable[..., RawServer]]:
    made: list[RawServer] = []

    def make(answer: Callable[[bytes], bytes | list[bytes] | None], close_after: bool = False) -> RawServer:
        made.append(RawServer(answer, close_after))
        return made[-1]

    yield make
    for server in made:
        server.close()


COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
}


def _reply(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 {status}\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body


def _sse(*chunks: dict[str, Any]) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return body.encode()


def _chunk(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }


def _chunks(
    server: RawServer, client: AsyncDirect | None = None, calls: int = 1
) -> list[list[dict[str, Any]]]:
    direct = client or AsyncDirect(5)
    worker = Worker("w", "openai/w", api_base=server.base_url)
    request = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "api_base": server.base_url}

    async def run() -> list[list[dict[str, Any]]]:
        out = []
        for _ in range(calls):
            out.append(await direct.read_chunks(await direct.open_stream(worker, request)))
        await direct.close()
        return out

    return asyncio.run(run())


def test_a_gzipped_reply_is_read_and_the_request_is_well_formed(raw: Callable[..., RawServer]) -> None:
    server = raw(lambda _: _reply(gzip.compress(_sse(_chunk("he"), _chunk("llo"))), "content-encoding: gzip"))
    [chunks] = _chunks(server)
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks) == "hello"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/chat/completions HTTP/1.1"
    assert f"host: 127.0.0.1:{server.port}" in lines and f"content-length: {len(body)}" in lines
    assert json.loads(body)["model"] == "w"


def test_chunked_streams_on_one_kept_alive_connection_and_a_closed_one_is_replaced(
    raw: Callable[..., RawServer],
) -> None:
    def chunked(_: bytes) -> bytes:
        body = _sse(_chunk("a"), _chunk("b"))
        pieces = [body[:7], body[7:30], body[30:]]  # split mid-line, across HTTP chunks
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            + framed
        )

    server = raw(chunked)
    direct = AsyncDirect(5)
    worker = Worker("w", "openai/w", api_base=server.base_url)
    request = {"messages": [], "stream": True, "api_base": server.base_url}

    async def run() -> list[list[dict[str, Any]]]:
        out = [await direct.read_chunks(await direct.open_stream(worker, request)) for _ in range(3)]
        server.close_connections()  # the server's keep-alive ran out
        await asyncio.sleep(0.1)
        out.append(await direct.read_chunks(await direct.open_stream(worker, request)))
        await direct.close()
        return out

    replies = asyncio.run(run())
    assert all([c["choices"][0]["delta"]["content"] for c in r] == ["a", "b"] for r in replies)
    assert server.connections == 2 and len(server.requests) == 4


def test_a_body_that_ends_with_its_connection_is_whole(raw: Callable[..., RawServer]) -> None:
    server = raw(
        lambda _: b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + _sse(_chunk("x")),
        close_after=True,
    )
    assert [[c["choices"][0]["delta"]["content"] for c in r] for r in _chunks(server, calls=2)] == [
        ["x"],
        ["x"],
    ]
    assert server.connections == 2


def _good_then_damaged() -> list[bytes]:
    """A chunked gzip stream sent in two pieces: its head and a whole event, then bytes that are not gzip."""
    packer = zlib.compressobj(wbits=31)
    good = packer.compress(_sse(_chunk("a"))) + packer.flush(zlib.Z_SYNC_FLUSH)
    head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
    first = f"{head}transfer-encoding: chunked\r\n\r\n".encode() + b"%x\r\n%s\r\n" % (len(good), good)
    return [first, b"7\r\ngarbage\r\n0\r\n\r\n"]


@pytest.mark.parametrize(
    ("reply", "error", "match"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\ndata: {}", ConnectionError, "closed the connection"),
        (b"NOT HTTP AT ALL\r\n\r\n", ConnectionError, "malformed response"),
        (_reply(b"x", "content-encoding: br"), ConnectionError, "br-encoded"),
        (_reply(b"not gzip", "content-encoding: gzip"), ConnectionError, "compressed reply is damaged"),
        (
            _reply(b'{"error": {"message": "slow down"}}', "retry-after: 7", status="429 Too Many"),
            HTTPStatusFault,
            "slow down",
        ),
    ],
    ids=["cut-short", "malformed", "unknown-encoding", "bad-gzip", "error-status"],
)
def test_faults_are_the_exceptions_classify_knows(
    raw: Callable[..., RawServer], reply: bytes | list[bytes], error: type[Exception], match: str
) -> None:
    server = raw(lambda _: reply, close_after=True)
    with pytest.raises(error, match=match) as raised:
        _chunks(server)
    if isinstance(raised.value, HTTPStatusFault):
        assert raised.value.status_code == 429 and raised.value.response.headers["retry-after"] == "7"


TEXT, JSON = "content-type: text/plain", "content-type: application/json"


def _ask(server: RawServer, client: str) -> list[dict[str, Any]]:
    """One streamed request's chunks, through serve's event-loop client or the agent's threads' client."""
    if client == "loop":
        [chunks] = _chunks(server)
        return chunks
    worker = Worker("w", "openai/w", api_base=server.base_url)
    request = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "api_base": server.base_url}
    return list(DirectClient(5).stream(worker, request))


@pytest.mark.parametrize("client", ["loop", "threads"])
@pytest.mark.parametrize(
    ("location", "says"),
    [
        (
            "https://api.example.com/v1/chat/completions",
            'set the worker\'s api_base to "https://api.example.com/v1"',
        ),
        ("/v2/chat/completions?x=1", 'set the worker\'s api_base to "http://127.0.0.1:{port}/v2"'),
        ("https://example.com/login", "set the worker's api_base to the address it moved to"),
        (None, "answered with a redirect and no address; check the worker's api_base"),
    ],
    ids=["absolute", "relative", "elsewhere", "no-address"],
)
def test_a_redirect_is_not_followed_and_says_what_to_set(
    raw: Callable[..., RawServer], client: str, location: str | None, says: str
) -> None:
    """A moved endpoint (an http:// api_base where the provider wants https://, a path moved) is not
    followed, so the request's body goes nowhere the pool does not name; its fault says the api_base to
    set and is not worth another attempt. Both clients: serve's event loop and the agent's threads."""
    head = ["content-type: text/html"] + ([f"location: {location}"] if location else [])
    server = raw(lambda _: _reply(b"<html>Moved</html>", *head, status="301 Moved Permanently"))
    with pytest.raises(HTTPStatusFault) as raised:
        _ask(server, client)
    assert raised.value.status_code == 301
    assert says.format(port=server.port) in str(raised.value)
    fault = classify(raised.value, 5)
    assert not fault.retryable and fault.cause.startswith("HTTP 301: ")
    assert len(server.requests) == 1


@pytest.mark.parametrize("client", ["loop", "threads"])
@pytest.mark.parametrize(
    ("reply", "says"),
    [
        (
            _reply(b"<html><body>\n  Log in to the Wi-Fi\n</body></html>", "content-type: text/html"),
            "a text/html reply, not a chat completion ('<html><body> Log in to the Wi-Fi </body></html>')",
        ),
        (_reply(b"", TEXT), "a text/plain reply, not a chat completion (an empty body)"),
        (_reply(b"{}", JSON), "a JSON reply that is not a chat completion ('{}')"),
        (_reply(b"[1, 2]", JSON), "a JSON reply that is not a chat completion"),
    ],
    ids=["web-page", "empty-text", "empty-json", "json-list"],
)
def test_a_reply_no_chat_endpoint_sends_says_to_check_the_api_base(
    raw: Callable[..., RawServer], client: str, reply: bytes, says: str
) -> None:
    """An api_base that leads to a web page (a captive portal, a server's home page) or to JSON that is
    no completion: one attempt, and a fault that quotes what came and says what to check, where it was
    "stream ended without any chunk" after four attempts."""
    server = raw(lambda _: reply)
    with pytest.raises(WrongEndpoint) as raised:
        _ask(server, client)
    assert says in str(raised.value)
    assert "check that its api_base is an OpenAI-compatible endpoint" in str(raised.value)
    assert not classify(raised.value, 5).retryable
    assert len(server.requests) == 1


@pytest.mark.parametrize("client", ["loop", "threads"])
def test_other_unusual_replies_keep_their_own_faults(raw: Callable[..., RawServer], client: str) -> None:
    """An error object sent with 200 is the provider's error, retried as a 500 would be; a 404 that is no
    provider's JSON error says the address nothing answers at, while a provider's 404 (an unknown model)
    is passed on as it is; an event stream that sends no event is left to the parser (retried)."""
    error = json.dumps({"error": {"message": "overloaded, try later"}}).encode()
    server = raw(lambda _: _reply(error, "content-type: application/json"))
    with pytest.raises(HTTPStatusFault, match="overloaded, try later") as status:
        _ask(server, client)
    assert status.value.status_code == 500 and classify(status.value, 5).retryable
    server = raw(lambda _: _reply(b"404 page not found", status="404 Not Found"))
    with pytest.raises(HTTPStatusFault) as status:
        _ask(server, client)
    url = f"{server.base_url}/chat/completions"
    assert str(status.value) == f"404 page not found; nothing answers at {url}: check the worker's api_base"
    unknown = json.dumps({"error": {"message": "The model `w` does not exist", "code": "model_not_found"}})
    server = raw(lambda _: _reply(unknown.encode(), status="404 Not Found"))
    with pytest.raises(HTTPStatusFault) as status:
        _ask(server, client)
    assert str(status.value) == "The model `w` does not exist (model_not_found)"
    server = raw(lambda _: _reply(b": keep-alive\n\n", "content-type: text/event-stream"))
    assert _ask(server, client) == []


@pytest.mark.parametrize("reader_late", [False, True], ids=["reader-waiting", "reader-late"])
def test_a_stream_damaged_after_its_first_event_fails_after_it(
    raw: Callable[..., RawServer], reader_late: bool
) -> None:
    """The event before the damage is read, then the damage raises, whether the reader was waiting when
    it came or reads only after the whole response (damage included) has arrived."""
    server = raw(lambda _: _good_then_damaged())
    direct = AsyncDirect(5)
    worker = Worker("w", "openai/w", api_base=server.base_url)
    seen: list[str] = []

    async def run() -> None:
        response = await direct.open_stream(worker, {"messages": [], "api_base": server.base_url})
        if reader_late:
            await asyncio.sleep(0.4)
        try:
            async for chunk in direct.iter_chunks(response):
                seen.append(chunk["choices"][0]["delta"]["content"])
        finally:
            await direct.close()

    with pytest.raises(ConnectionError, match="compressed reply is damaged"):
        asyncio.run(run())
    assert seen == ["a"]


def test_a_silent_server_times_out_and_a_refused_one_is_a_connection_error(
    raw: Callable[..., RawServer],
) -> None:
    server = raw(lambda _: None)
    with pytest.raises(TimeoutError, match=r"no data from the worker for 0\.3 s"):
        _chunks(server, AsyncDirect(0.3))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="cannot connect"):
        asyncio.run(LoopHTTP(1, 1).post(f"http://127.0.0.1:{dead}/v1", b"{}", {}, None))


def test_a_caller_that_gives_up_waiting_closes_its_connection(raw: Callable[..., RawServer]) -> None:
    server = raw(lambda _: None)
    http = LoopHTTP(5, 5)

    async def run() -> int:
        task = asyncio.ensure_future(http.post(server.base_url + "/chat/completions", b"{}", {}, None))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return len(http._open)

    assert asyncio.run(run()) == 0


def test_urls() -> None:
    assert _split("https://api.example.com/v1/chat") == ("https", "api.example.com", 443, "/v1/chat")
    assert _split("http://user:pw@[::1]:8080/x?q=1") == ("http", "::1", 8080, "/x?q=1")
    assert _split("http://h") == ("http", "h", 80, "/")
    for bad in ("ftp://h/", "http://:80/", "http://h:port/", "http://h:99999/"):
        with pytest.raises(ConnectionError):
            _split(bad)


def test_a_client_used_from_a_second_event_loop_opens_its_own_connections(
    raw: Callable[..., RawServer],
) -> None:
    server = raw(lambda _: _reply(json.dumps(COMPLETION).encode(), "content-type: application/json"))
    direct = AsyncDirect(5)
    worker = Worker("w", "openai/w", api_base=server.base_url)

    async def one() -> str:
        response = await direct.open_stream(worker, {"messages": [], "api_base": server.base_url})
        [chunk] = await direct.read_chunks(response)
        return str(chunk["choices"][0]["delta"]["content"])

    assert [asyncio.run(one()), asyncio.run(one())] == ["hello", "hello"]  # the first loop's is kept idle
    assert server.connections == 2


def test_a_line_break_in_a_key_or_a_space_in_the_url_is_refused_before_anything_is_sent(
    raw: Callable[..., RawServer],
) -> None:
    """A header injected through a key with a line break (or a request line split by a URL with a space)
    would reach the worker as fugu's own words: refused here, nothing sent."""
    server = raw(lambda _: _reply(b"{}"))
    worker = Worker("w", "openai/w", api_base=server.base_url)
    for request in (
        {"messages": [], "api_base": server.base_url, "api_key": "sk-1\r\nx-injected: yes"},
        {"messages": [], "api_base": server.base_url + "/a b"},
    ):

        async def post(request: dict[str, Any] = request) -> None:
            await AsyncDirect(5).open_stream(worker, request)

        with pytest.raises(ValueError, match="line break, space or control character"):
            asyncio.run(post())
    assert server.requests == [] and server.connections == 0  # not even a connection was opened


def test_an_idle_connection_the_server_speaks_on_is_not_reused(raw: Callable[..., RawServer]) -> None:
    """A server that writes on a kept-alive connection between requests (a 408 when its keep-alive ends)
    would put its words before the next reply: that connection is dropped and the next call opens one."""
    reply = _reply(json.dumps(COMPLETION).encode(), "content-type: application/json")
    server = raw(lambda _: [reply, b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n"])
    direct = AsyncDirect(5)
    worker = Worker("w", "openai/w", api_base=server.base_url)

    async def run() -> list[str]:
        out = []
        for _ in range(2):
            response = await direct.open_stream(worker, {"messages": [], "api_base": server.base_url})
            [chunk] = await direct.read_chunks(response)
            out.append(str(chunk["choices"][0]["delta"]["content"]))
            await asyncio.sleep(0.3)  # the 408 comes 0.1 s after the reply
        await direct.close()
        return out

    assert asyncio.run(run()) == ["hello", "hello"]
    assert server.connections == 2
