"""The door of `fugu serve`, an ASGI middleware in front of every route: a `Host` that is not the bound host
is refused (DNS rebinding), so is an `Origin` not allowed with `--cors-origin` (cross-site requests), a POST
that is not JSON (HTML forms), and a missing or wrong bearer key. Browsers' CORS preflights are answered here
for allowed origins. Refusals are in OpenAI's error shape.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fugu_cli.serve.wire import ApiError

METHODS = "GET, POST, DELETE, OPTIONS, HEAD"
EXPOSED = "x-fugu-session, x-fugu-replayed, x-fugu-dropped, x-should-retry"


def host_name(host: str) -> str:
    """The name part of a Host header ("[::1]:8787" -> "::1", "localhost:80" -> "localhost")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    def __init__(
        self, app: ASGIApp, *, hosts: frozenset[str] | None, origins: Sequence[str], api_key: str | None
    ) -> None:
        self.app = app
        self.hosts = hosts
        self.origins = frozenset(o.rstrip("/") for o in origins)
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        try:
            self._check_host(headers)
            if origin is not None and origin.rstrip("/") not in self.origins:
                raise ApiError(
                    403,
                    f"origin {origin} is not allowed (fugu serve --cors-origin allows one)",
                    code="origin_not_allowed",
                )
            if scope["method"] == "OPTIONS":
                await self._options(headers, origin, send)
                return
            self._check_key(headers)
            if scope["method"] == "POST":
                self._check_json(headers)
        except ApiError as e:
            await _refuse(e, send, origin if origin in self.origins else None)
            return
        if origin is None:
            await self.app(scope, receive, send)
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["access-control-allow-origin"] = origin
                out["access-control-expose-headers"] = EXPOSED
                out.append("vary", "Origin")
            await send(message)

        await self.app(scope, receive, with_cors)

    def _check_host(self, headers: Headers) -> None:
        if self.hosts is None:
            return
        name = host_name(headers.get("host", ""))
        if name not in self.hosts:
            raise ApiError(
                403, f"host {name or '(none)'} is not this server's address", code="host_not_allowed"
            )

    def _check_key(self, headers: Headers) -> None:
        if not self.api_key:
            return
        given = headers.get("authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(token.encode(), self.api_key.encode()):
            raise ApiError(
                401,
                "invalid API key: send the key fugu serve was given as a bearer token",
                "invalid_request_error",
                "invalid_api_key",
            )

    def _check_json(self, headers: Headers) -> None:
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json" and not (kind.startswith("application/") and kind.endswith("+json")):
            raise ApiError(
                415,
                f"Content-Type must be application/json, not {kind or '(none)'}",
                code="unsupported_media_type",
            )

    async def _options(self, headers: Headers, origin: str | None, send: Send) -> None:
        out = [(b"allow", METHODS.encode()), (b"content-length", b"0")]
        if origin is not None:
            asked = headers.get("access-control-request-headers", "authorization, content-type")
            out += [
                (b"access-control-allow-origin", origin.encode()),
                (b"access-control-allow-methods", METHODS.encode()),
                (b"access-control-allow-headers", asked.encode()),
                (b"access-control-max-age", b"600"),
                (b"vary", b"Origin"),
            ]
        await send({"type": "http.response.start", "status": 204, "headers": out})
        await send({"type": "http.response.body", "body": b""})


async def _refuse(error: ApiError, send: Send, origin: str | None) -> None:
    payload = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if error.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if origin is not None:
        headers += [(b"access-control-allow-origin", origin.encode()), (b"vary", b"Origin")]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
