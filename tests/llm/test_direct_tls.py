"""The direct client's transports (fugu_cli/llm/direct.py): a plain http:// worker is reached without the CA
bundle being read (a launch's worth of time), and an https:// worker is verified as httpx always does: a
self-signed server is refused unless the user trusts its certificate (SSL_CERT_FILE); proxies are taken from
the environment. The event loop's client (`AsyncDirect`, serve's pass-through) verifies the same way, and
leaves a worker that a proxy carries to the threads' client."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.llm.client import ClientConfig
from fugu_cli.llm.direct import AsyncDirect, DirectClient, HTTPStatusFault
from fugu_cli.llm.forward import Forwarder, whole_from_chunks
from fugu_cli.types import Worker
from tests.loopback import LoopbackServer

REQUEST = {"messages": [{"role": "user", "content": "hi"}]}


def _call(api_base: str, loop: bool = False) -> dict[str, Any]:
    worker = Worker(name="w", model="openai/w", api_base=api_base)
    if not loop:
        return DirectClient(30).complete(worker, REQUEST | {"api_base": api_base})
    client = AsyncDirect(30)

    async def streamed() -> dict[str, Any]:
        try:
            response = await client.open_stream(worker, REQUEST | {"api_base": api_base, "stream": True})
            return whole_from_chunks(await client.read_chunks(response))
        finally:
            await client.close()

    return asyncio.run(streamed())


def _bundles_read(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every verifying SSL context made from now on (httpx makes one with `ssl.create_default_context`,
    which reads the CA bundle; its context for `verify=False` is a bare `ssl.SSLContext`)."""
    made: list[Any] = []
    real = ssl.create_default_context

    def spy(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(kwargs.get("cafile") or kwargs.get("capath") or "default")
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", spy)
    return made


def _self_signed(folder: Path) -> tuple[Path, Path]:
    key, cert = folder / "key.pem", folder / "cert.pem"
    args = ["-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run(
        [
            "openssl",
            "req",
            *args,
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


def _https(server: LoopbackServer, key: Path, cert: Path) -> str:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    httpd = server._httpd
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    return f"https://127.0.0.1:{server.port}/v1"


@pytest.mark.parametrize("loop", [False, True], ids=["threads", "event-loop"])
def test_a_plain_http_worker_is_reached_without_reading_certificates(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch, loop: bool
) -> None:
    made = _bundles_read(monkeypatch)
    reply = _call(loopback.base_url, loop)
    assert reply["choices"][0]["message"]["content"]
    assert made == []  # no CA bundle was read


@pytest.mark.parametrize("loop", [False, True], ids=["threads", "event-loop"])
def test_an_https_worker_is_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop: bool) -> None:
    key, cert = _self_signed(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with LoopbackServer() as server:
        url = _https(server, key, cert)
        made = _bundles_read(monkeypatch)
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            _call(url, loop)
        assert len(made) == 1  # the https:// transport, made on first use, verifies with the CA bundle
        assert not [r for r in server.requests if r.method == "POST"]  # nothing was sent to it

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the user trusts this server's certificate
        reply = _call(url, loop)
        assert reply["choices"][0]["message"]["content"]


def test_the_environments_proxy_carries_the_call_unless_no_proxy_names_the_host(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As httpx did: HTTP_PROXY is used for http:// workers (the request goes to the proxy, in absolute
    form), and NO_PROXY exempts a host."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", loopback.url)  # the loopback plays the proxy: it only records
    with pytest.raises(HTTPStatusFault, match=r"no route http://worker\.invalid/v1/chat/completions"):
        _call("http://worker.invalid/v1")
    assert [r.path for r in loopback.requests] == ["http://worker.invalid/v1/chat/completions"]

    with LoopbackServer() as worker:
        with socket.socket() as s:  # a proxy that is not there: the call must not go to it
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        reply = _call(worker.base_url)
        assert reply["choices"][0]["message"]["content"]
        assert [r.path for r in worker.requests] == ["/v1/chat/completions"]


def test_a_worker_the_proxy_carries_is_not_called_from_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event loop's client speaks to workers directly; where the environment's proxy would carry a
    worker, serve calls the whole pool from worker threads (urllib3, which speaks every kind of proxy)."""
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    local = Worker(name="local", model="openai/local", api_base="http://127.0.0.1:9/v1")
    hosted = Worker(name="hosted", model="openai/gpt-5")  # api.openai.com
    params = {"messages": REQUEST["messages"]}
    assert Forwarder(ClientConfig()).in_loop([local, hosted], params)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    forwarder = Forwarder(ClientConfig())
    assert forwarder.adirect.reaches(local) and not forwarder.adirect.reaches(hosted)
    assert forwarder.in_loop([local], params) and not forwarder.in_loop([local, hosted], params)
    assert not forwarder.streams_in_loop([local, hosted])
