"""The short way to an OpenAI-compatible worker (model `openai/...`): the request posted as it is, over one
pooled HTTP connection per worker, its reply read as it is. No translation is needed, so none is paid for
(litellm adds about 10 ms a call and seconds to import); every other provider goes through litellm. Used by
the agent's client (client.py) and by serve's pass-through (forward.py).

Failures are raised as the exceptions `faults.classify` knows (status codes, timeouts, connection errors).
httpx is imported on first use. Never prints.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from collections.abc import Iterator, Mapping
from typing import Any, Literal

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


class DirectClient:
    """Posts chat-completions requests to OpenAI-compatible endpoints. Thread-safe."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._client: Any = None
        self._lock = threading.Lock()

    def warm(self) -> None:
        self._http()

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                _without_httpx_cli()
                import httpx

                limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
                timeout = httpx.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0))
                self._client = httpx.Client(timeout=timeout, limits=limits, transport=_by_scheme(limits))
            return self._client

    def complete(self, worker: Worker, request: Mapping[str, Any]) -> dict[str, Any]:
        """The worker's chat.completion as JSON."""
        with _faults():
            response = self._http().post(**_post(worker, request))
            if response.status_code >= 400:
                raise HTTPStatusFault(response.status_code, response.text, response)
            data: dict[str, Any] = response.json()
            return data

    def stream(self, worker: Worker, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The worker's chunks as JSON objects. The connection is open when this returns (a refusal raises
        here); closing the iterator closes it."""
        http = self._http()
        with _faults():
            response = http.send(http.build_request("POST", **_post(worker, request)), stream=True)
            if response.status_code >= 400:
                text = response.read().decode("utf-8", "replace")
                response.close()
                raise HTTPStatusFault(response.status_code, text, response)
        if "json" in response.headers.get("content-type", ""):
            return _whole_as_chunk(response)
        return _chunks(response)

    def post(self, url: str, body: Mapping[str, Any], api_key: str | None) -> dict[str, Any]:
        """POST `body` as JSON to `url` (an OpenAI-compatible endpoint other than chat completions)."""
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        with _faults():
            response = self._http().post(url, content=json.dumps(body), headers=headers)
            if response.status_code >= 400:
                raise HTTPStatusFault(response.status_code, response.text, response)
            data: dict[str, Any] = response.json()
            return data


def _without_httpx_cli() -> None:
    """httpx imports its command-line tool (and click and rich with it: half of its import time) only to
    offer `httpx.main`; fugu never runs it, so a stand-in takes its place before httpx is first imported."""
    if "httpx" in sys.modules or "httpx._main" in sys.modules:
        return
    stand_in = types.ModuleType("httpx._main")

    def main() -> None:
        raise SystemExit("httpx's command line is not loaded in fugu's process")

    stand_in.main = main  # type: ignore[attr-defined]
    sys.modules["httpx._main"] = stand_in


def _by_scheme(limits: Any) -> Any:
    """httpx's transport, with the CA bundle read when the first https:// request needs it, not when the
    client is made: reading it is about 50 ms of a launch that a local worker (http://) never needs. Proxies
    from the environment are httpx's own, as before."""
    import httpx

    class ByScheme(httpx.BaseTransport):
        def __init__(self) -> None:
            # only http:// URLs reach this one, so it never speaks TLS and needs no certificates
            self.plain = httpx.HTTPTransport(limits=limits, verify=False)
            self.tls: httpx.HTTPTransport | None = None
            self.lock = threading.Lock()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.scheme == "http":
                return self.plain.handle_request(request)
            with self.lock:
                if self.tls is None:
                    self.tls = httpx.HTTPTransport(limits=limits)  # verify=True: httpx's default checks
            return self.tls.handle_request(request)

        def close(self) -> None:
            self.plain.close()
            if self.tls is not None:
                self.tls.close()

    return ByScheme()


def _post(worker: Worker, request: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in request.items() if k not in ("api_base", "api_key")}
    body["model"] = worker.model.removeprefix("openai/")
    headers = {"Content-Type": "application/json"}
    if request.get("api_key"):
        headers["Authorization"] = f"Bearer {request['api_key']}"
    base = str(request.get("api_base") or OPENAI_BASE).rstrip("/")
    return {"url": f"{base}/chat/completions", "content": json.dumps(body), "headers": headers}


# after `[DONE]`, what a stream may still send before its end (blank lines, the chunked terminator) is read,
# so its connection goes back to the pool for the next call; a server that goes on past this is cut
_AFTER_DONE_LINES = 16


def _chunks(response: Any) -> Iterator[dict[str, Any]]:
    try:
        with _faults():
            lines = response.iter_lines()
            for line in lines:
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    _drain(response, lines)
                    return
                data = json.loads(payload)
                if isinstance(data, dict) and "error" in data and "choices" not in data:
                    raise HTTPStatusFault(500, payload, response)
                yield data
    finally:
        response.close()


def _drain(response: Any, lines: Iterator[str]) -> None:
    """Reads a finished stream to its end, so its connection can serve the next call (closing a response
    before its end closes the connection: every call then paid for a new one, a TCP and, to a hosted worker,
    a TLS handshake). As the openai SDK does, only where HTTP/1.1 says where the body ends (chunked or a
    length): a body that ends when the connection closes leaves nothing to reuse. A few lines at most; a
    reply that is complete stays complete whatever the rest does (a server holding its response open after
    `[DONE]` is waited for up to the read timeout)."""
    headers = response.headers
    delimited = "chunked" in headers.get("transfer-encoding", "") or "content-length" in headers
    if response.http_version != "HTTP/1.1" or not delimited:
        return
    try:
        for _ in zip(range(_AFTER_DONE_LINES), lines, strict=False):
            pass
    except Exception:  # the reply is complete: what comes after it cannot fail it
        pass


def _whole_as_chunk(response: Any) -> Iterator[dict[str, Any]]:
    """A server that ignores `stream` and sends the whole completion: the same reply as one chunk."""
    try:
        with _faults():
            data = json.loads(response.read())
    finally:
        response.close()
    if not isinstance(data, dict):
        raise ValueError(f"not a chat completion: {str(data)[:200]}")
    choices = [
        {"index": c.get("index", i), "delta": c.get("message") or {}, "finish_reason": c.get("finish_reason")}
        for i, c in enumerate(data.get("choices") or [])
        if isinstance(c, dict)
    ]
    yield data | {"choices": choices}


class _faults:
    """httpx's exceptions as the builtin ones `classify` recognises."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> Literal[False]:
        if exc is None or kind is None:
            return False
        name = kind.__name__
        if name.endswith("Timeout") or name == "TimeoutException":
            raise TimeoutError(str(exc) or name) from exc
        if name in ("ConnectError", "ReadError", "WriteError", "RemoteProtocolError", "NetworkError"):
            raise ConnectionError(str(exc) or name) from exc
        return False
