"""The short way to an OpenAI-compatible worker (model `openai/...`): the request posted as it is, over one
pooled HTTP connection per worker, its reply read as it is. No translation is needed, so none is paid for
(litellm adds about 10 ms a call and seconds to import); every other provider goes through litellm. Used by
the agent's client (client.py) and by serve's pass-through (forward.py).

Failures are raised as the exceptions `faults.classify` knows (status codes, timeouts, connection errors).
urllib3 is imported on first use. Never prints.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, Literal

from fugu_cli.llm.parse import WrongEndpoint
from fugu_cli.types import Worker

OPENAI_BASE = "https://api.openai.com/v1"


def is_openai_compatible(worker: Worker) -> bool:
    return worker.model.startswith("openai/")


class HTTPStatusFault(Exception):
    """A worker answered with an error status; `body` is its parsed error, `response` carries its headers."""

    def __init__(self, status_code: int, text: str, response: Any) -> None:
        self.status_code = status_code
        self.response = response
        try:
            self.body: Any = json.loads(text)
        except ValueError:
            self.body = None
        error = self.body.get("error") if isinstance(self.body, dict) else None
        message = error.get("message") if isinstance(error, dict) else (error or text[:300])
        code = error.get("code") if isinstance(error, dict) else None
        # the status is said by whoever reports the fault (`faults.classify`), not twice
        super().__init__(f"{message}" + (f" ({code})" if code else ""))


def status_fault(status: int, text: str, response: Any, url: str) -> HTTPStatusFault:
    """What a response with a redirect (3xx) or an error status (400 and up) stands for. A redirect is not
    followed: a chat request's body must not be sent on to an address the pool does not name (and most
    clients turn a redirected POST into a GET). It says where the endpoint moved, so that the user can set
    the worker's api_base to it (`url`: the address asked, against which a relative one is read)."""
    if status >= 400:
        fault = HTTPStatusFault(status, text, response)
        if status == 404 and fault.body is None:  # not a provider's JSON error: no endpoint at this address
            said = f"{_printable(text.strip())[:120] or 'not found'}; nothing answers at {url}: check the "
            return HTTPStatusFault(status, f"{said}worker's api_base", response)
        return fault
    from urllib.parse import urljoin

    headers = getattr(response, "headers", None) or {}
    said_location = _printable(str(headers.get("location") or ""))
    location = urljoin(url, said_location)[:100] if said_location else ""
    if not location:
        said = "the endpoint answered with a redirect and no address; check the worker's api_base"
    else:
        base = location.split("?")[0].removesuffix("/").removesuffix("/chat/completions")
        said = f"the endpoint moved to {location}; fugu does not follow redirects: set the worker's "
        said += f'api_base to "{base}"' if base != location else "api_base to the address it moved to"
    return HTTPStatusFault(status, said, response)


def _printable(text: str) -> str:
    """A server's words as fugu may print them: no terminal control characters, one line."""
    return "".join(c if c.isprintable() else " " for c in text)


_HEAD = 300  # how much of a body that is no stream is kept, to quote its start


def _is_event_stream(response: Any) -> bool:
    return "text/event-stream" in str(response.headers.get("content-type") or "").lower()


def _not_a_stream(response: Any, head: bytes) -> WrongEndpoint:
    """The fault of a body that ended without one event (`head`: its first bytes): a web page, a bare
    text. A stream that says nothing at all is the parser's (`MalformedReply`, retried)."""
    kind = str(response.headers.get("content-type") or "").split(";")[0].strip() or "untyped"
    return _wrong_endpoint(f"a {_printable(kind)} reply, not a chat completion", head)


def _wrong_endpoint(what: str, body: bytes) -> WrongEndpoint:
    """`what` came where a chat completion was asked for, quoted by the start of its `body`."""
    text = " ".join(_printable(body.decode("utf-8", "replace")).split())[:100]
    said = repr(text) if text else "an empty body"
    return WrongEndpoint(
        f"{what} ({said}): check that its api_base is an OpenAI-compatible endpoint (it ends in /v1 for most "
        "servers)"
    )


class DirectClient:
    """Posts chat-completions requests to OpenAI-compatible endpoints. Thread-safe.

    Over urllib3, not httpx: on a loopback worker a streamed call through httpx cost about 0.8 ms more of
    the caller's time than the same call through urllib3 (docs/BENCHMARKS.md, serve). As httpx did: one pool
    of kept-alive connections per scheme, https verified against certifi's CA bundle (or SSL_CERT_FILE /
    SSL_CERT_DIR, read once, when the first https:// request is made), proxies from the environment
    (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY), no retries and no redirects of its own."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._managers: dict[str, Any] = {}
        self._proxies: dict[str, str] | None = None
        self._timeout: Any = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        self._manager("http://127.0.0.1/")

    def _manager(self, url: str) -> Any:
        """The pool for `url`: direct or through the environment's proxy for its scheme."""
        import urllib.request

        scheme = url.partition("://")[0]
        with self._lock:
            if self._proxies is None:
                import urllib3

                self._proxies = urllib.request.getproxies_environment()
                self._timeout = urllib3.Timeout(connect=min(self.timeout_s, 10.0), read=self.timeout_s)
            proxy = _proxy_for(url, self._proxies)
            key = f"{scheme} via {proxy}" if proxy else scheme
            manager = self._managers.get(key)
            if manager is None:
                manager = self._managers[key] = _pool_manager(scheme, proxy)
            return manager

    def _send(self, url: str, body: bytes, headers: Mapping[str, str], stream: bool = False) -> Any:
        """POST `body` to `url`: the response, whole unless `stream`; an error status or a redirect raises."""
        response = self._manager(url).request(
            "POST",
            url,
            body=body,
            headers=dict(headers),
            timeout=self._timeout,
            retries=False,
            redirect=False,
            preload_content=not stream,
        )
        if response.status >= 300:
            text = (response.read() if stream else response.data).decode("utf-8", "replace")
            response.release_conn()
            raise status_fault(response.status, text, response, url)
        return response

    def complete(self, worker: Worker, request: Mapping[str, Any]) -> dict[str, Any]:
        """The worker's chat.completion as JSON."""
        with _faults():
            data: dict[str, Any] = json.loads(self._send(**_post(worker, request)).data)
            return data

    def stream(self, worker: Worker, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The worker's chunks as JSON objects. The connection is open when this returns (a refusal raises
        here); closing the iterator closes it."""
        with _faults():
            response = self._send(**_post(worker, request), stream=True)
        if "json" in response.headers.get("content-type", ""):
            return _whole_as_chunk(response)
        return _chunks(response)

    def post(self, url: str, body: Mapping[str, Any], api_key: str | None) -> dict[str, Any]:
        """POST `body` as JSON to `url` (an OpenAI-compatible endpoint other than chat completions)."""
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        with _faults():
            data: dict[str, Any] = json.loads(self._send(url, json.dumps(body).encode(), headers).data)
            return data


def _proxy_for(url: str, proxies: Mapping[str, str]) -> str | None:
    """The proxy `url` goes through by the environment (`urllib.request.getproxies_environment()`), if any."""
    import urllib.request

    scheme, _, rest = url.partition("://")
    proxy = proxies.get(scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if proxy and bypass(rest.split("/", 1)[0], proxies):
        return None
    return proxy


def _pool_manager(scheme: str, proxy: str | None) -> Any:
    """urllib3's pool for one scheme. A plain http:// one never speaks TLS, so it reads no certificates
    (about 50 ms of a launch that a local worker never needs); an https:// one verifies as httpx did."""
    import urllib3

    # up to 256 connections kept per host (httpx's limit was 256 open, 64 kept): past its size, urllib3
    # opens more but drops them after use, and says so in a warning that would reach the terminal
    options: dict[str, Any] = {"num_pools": 32, "maxsize": 256, "block": False}
    if scheme == "https":
        options["ssl_context"] = _verifying_context()
    if proxy:
        return urllib3.ProxyManager(proxy, **options)
    return urllib3.PoolManager(**options)


def _verifying_context() -> Any:
    """What httpx verifies with: the CA bundle or folder the environment names, else certifi's."""
    import os
    import ssl

    cafile, capath = os.environ.get("SSL_CERT_FILE") or None, os.environ.get("SSL_CERT_DIR") or None
    if cafile is None and capath is None:
        import certifi

        cafile = certifi.where()
    return ssl.create_default_context(cafile=cafile, capath=capath)


def _post(worker: Worker, request: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in request.items() if k not in ("api_base", "api_key")}
    body["model"] = worker.model.removeprefix("openai/")
    headers = {"Content-Type": "application/json"}
    if request.get("api_key"):
        headers["Authorization"] = f"Bearer {request['api_key']}"
    base = str(request.get("api_base") or OPENAI_BASE).rstrip("/")
    return {"url": f"{base}/chat/completions", "body": json.dumps(body).encode(), "headers": headers}


# after `[DONE]`, what a stream may still send before its end (blank lines, the chunked terminator) is read,
# so its connection goes back to the pool for the next call; a server that goes on past this is cut
_AFTER_DONE_LINES = 16


def _lines(response: Any) -> Iterator[str]:
    """The body's lines as they arrive (each read returns what the connection has, not a full buffer)."""
    pending = b""
    while True:
        data = response.read1(65536)
        if not data:
            break
        pending += data
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


_DONE: dict[str, Any] = {}  # what `_event` says of `data: [DONE]`


def _event(line: str, response: Any) -> dict[str, Any] | None:
    """One line of a stream: its chunk, `_DONE`, or None (not a data line). An error sent as an event
    raises, as an error status would."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return _DONE
    data = json.loads(payload)
    if isinstance(data, dict) and "error" in data and "choices" not in data:
        raise HTTPStatusFault(500, payload, response)
    return data  # type: ignore[no-any-return]


def _chunks(response: Any) -> Iterator[dict[str, Any]]:
    ended = False
    seen, head = False, ""
    try:
        with _faults():
            lines = _lines(response)
            for line in lines:
                data = _event(line, response)
                if data is _DONE:
                    ended = _drain(response, lines)
                    return
                if data is not None:
                    seen = True
                    yield data
                elif not seen and len(head) < _HEAD:
                    head += line + "\n"
        if not seen and not _is_event_stream(response):
            raise _not_a_stream(response, head.encode())
    finally:
        if ended:
            response.release_conn()  # read to its end: the connection serves the next call
        else:
            response.close()


def _drain(response: Any, lines: Iterator[str]) -> bool:
    """Reads a finished stream to its end, so its connection can serve the next call (closing a response
    before its end closes the connection: every call then paid for a new one, a TCP and, to a hosted worker,
    a TLS handshake). As the openai SDK does, only where HTTP/1.1 says where the body ends (chunked or a
    length): a body that ends when the connection closes leaves nothing to reuse. A few lines at most; a
    reply that is complete stays complete whatever the rest does (a server holding its response open after
    `[DONE]` is waited for up to the read timeout). True when the body was read to its end."""
    headers = response.headers
    delimited = "chunked" in headers.get("transfer-encoding", "") or "content-length" in headers
    if response.version != 11 or not delimited:
        return False
    try:
        for _ in zip(range(_AFTER_DONE_LINES), lines, strict=False):
            pass
        return next(lines, None) is None
    except Exception:  # the reply is complete: what comes after it cannot fail it
        return False


def _whole_as_chunk(response: Any) -> Iterator[dict[str, Any]]:
    """A server that ignores `stream` and sends the whole completion: the same reply as one chunk."""
    try:
        with _faults():
            raw = response.read()
        response.release_conn()
    finally:
        response.close()
    yield _as_chunk(raw)


def _as_chunk(raw: bytes) -> dict[str, Any]:
    """A whole chat.completion's body as the one chunk that says the same. An error object (some servers
    send one with 200) raises as an error status would; JSON that is neither is not a chat endpoint's."""
    data = json.loads(raw)
    if isinstance(data, dict) and "error" in data and "choices" not in data:
        raise HTTPStatusFault(500, raw.decode("utf-8", "replace"), None)
    if not isinstance(data, dict) or "choices" not in data:
        raise _wrong_endpoint("a JSON reply that is not a chat completion", raw)
    choices = [
        {"index": c.get("index", i), "delta": c.get("message") or {}, "finish_reason": c.get("finish_reason")}
        for i, c in enumerate(data.get("choices") or [])
        if isinstance(c, dict)
    ]
    return data | {"choices": choices}


class _faults:
    """urllib3's exceptions as the builtin ones `classify` recognises."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or kind is None or "urllib3" not in sys.modules:
            return False
        from urllib3 import exceptions as u3

        if isinstance(exc, (u3.NewConnectionError, u3.ProtocolError, u3.SSLError, u3.ProxyError)):
            raise ConnectionError(str(exc) or kind.__name__) from exc
        if isinstance(exc, u3.TimeoutError):
            raise TimeoutError(str(exc) or kind.__name__) from exc
        if isinstance(exc, u3.HTTPError) and not isinstance(exc, u3.DecodeError):
            raise ConnectionError(str(exc) or kind.__name__) from exc
        return False


class AsyncDirect:
    """The direct path from an event loop (serve's pass-through): kept-alive connections made in the loop
    on first use (`loop_http`), with the same verification, timeouts and fault classes as `DirectClient`.
    A worker that the environment's proxy would carry is not reached from here (`reaches`): serve calls it
    from a worker thread through `DirectClient`, which speaks to every kind of proxy."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._http: Any = None
        self._tls: Any = None
        self._proxies: dict[str, str] | None = None

    def reaches(self, worker: Worker) -> bool:
        """Whether `worker` is reached without a proxy (the environment's, looked up once)."""
        if self._proxies is None:
            import urllib.request

            self._proxies = urllib.request.getproxies_environment()
        base = str(worker.api_base or OPENAI_BASE)
        return not self._proxies or _proxy_for(f"{base.rstrip('/')}/chat/completions", self._proxies) is None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def open_stream(self, worker: Worker, request: Mapping[str, Any]) -> Any:
        """Posts a streamed request; the response once its status line came (an error status or a redirect
        raises)."""
        post = _post(worker, request)
        if self._http is None:
            from fugu_cli.llm.loop_http import LoopHTTP

            self._http = LoopHTTP(connect_timeout_s=min(self.timeout_s, 10.0), read_timeout_s=self.timeout_s)
        tls = None
        if post["url"].startswith("https://"):
            if self._tls is None:
                self._tls = _verifying_context()
            tls = self._tls
        response = await self._http.post(post["url"], post["body"], post["headers"], tls)
        if response.status >= 300:
            try:
                text = await response.text()
            finally:
                response.release()
            raise status_fault(response.status, text, response, post["url"])
        return response

    async def read_chunks(self, response: Any) -> list[dict[str, Any]]:
        """A stream's chunks to its end (a whole JSON reply as one chunk, as `DirectClient.stream`)."""
        return [chunk async for chunk in self.iter_chunks(response)]

    async def iter_chunks(self, response: Any) -> AsyncIterator[dict[str, Any]]:
        """A stream's chunks as they come (a whole JSON reply as one chunk). Read to its end, the connection
        goes back to the pool; left early (closed), it is closed (tests/llm/test_forward.py sees the next
        call on a new one)."""
        try:
            if "json" in response.headers.get("content-type", ""):
                yield _as_chunk(await response.read())
                return
            events = _Events(response)
            while (data := await response.part()) and not events.cut:
                for chunk in events.feed(data):
                    yield chunk
                events.check()
            for chunk in events.end():
                yield chunk
            events.check()
        finally:
            response.release()


class _Events:
    """A streamed body's events, fed as its bytes arrive: the chunks each piece completes (`feed`, then
    `end`). After `[DONE]` up to `_AFTER_DONE_LINES` lines are read, so the body is read to its end and its
    connection is kept; past them the stream is `cut` (its connection is then closed). An error sent as an
    event is raised by `check`, after the chunks that came before it."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.pending = b""
        self.after = 0
        self.cut = False
        self.error: Exception | None = None
        self.seen = False  # an event came
        self.head = b""  # the body's first bytes while no event has come

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if not self.seen and len(self.head) < _HEAD:
            self.head += data[:_HEAD]
        self.pending += data
        if b"\n" not in self.pending:
            return []
        *lines, self.pending = self.pending.split(b"\n")
        return self._lines(lines)

    def end(self) -> list[dict[str, Any]]:
        rest, self.pending = self.pending, b""
        out = self._lines([rest]) if rest and not self.cut else []
        if not self.seen and self.error is None and not _is_event_stream(self.response):
            self.error = _not_a_stream(self.response, self.head)
        return out

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def _lines(self, lines: list[bytes]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for raw in lines:
            if self.error is not None:
                break
            if self.after:
                self.after += 1
                if self.after > _AFTER_DONE_LINES:
                    self.cut = True  # a server that goes on after its reply
                    break
                continue
            try:
                data = _event(raw.decode("utf-8", "replace").strip(), self.response)
            except Exception as e:  # raised once the chunks before it are out
                self.error = e
                break
            if data is _DONE:
                self.after = 1
            elif data is not None:
                self.seen = True
                out.append(data)
        return out
