"""A real web server on 127.0.0.1 for web_fetch's tests: pages scripted per path (status, headers, body),
every request recorded (path and Host header), reachable as 127.0.0.1 and as localhost (two host names for
one server, so a redirect can cross from an allowed host to a denied one)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Page:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/html; charset=utf-8"})


class PageServer:
    def __init__(self) -> None:
        self.pages: dict[str, Page] = {}
        self.requests: list[tuple[str, str]] = []  # (Host header, path)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.requests.append((self.headers.get("Host", ""), self.path))
                page = server.pages.get(self.path, Page(b"not found", 404, {"Content-Type": "text/plain"}))
                self.send_response(page.status)
                for key, value in page.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(page.body)))
                self.end_headers()
                self.wfile.write(page.body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def html(self, path: str, html: str) -> str:
        self.pages[path] = Page(html.encode())
        return self.url(path)

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        self.pages[path] = Page(b"", status, {"Location": location})
        return self.url(path)

    def paths(self) -> list[str]:
        return [p for _, p in self.requests]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def pages() -> Iterator[PageServer]:
    server = PageServer()
    try:
        yield server
    finally:
        server.close()
