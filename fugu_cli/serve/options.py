"""`fugu serve`'s settings (`ServeOptions`): the run options its sessions are made from (the repository, the
pool, the router, what its agent may do, limits), where it listens, who may call it (key, hosts, browser
origins) and the sizes that keep it up under load. Plain data; no I/O but reading the environment for the
key."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field

from fugu_cli.errors import ConfigError
from fugu_cli.options import RunOptions

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _read_only() -> RunOptions:
    return RunOptions(permission_mode="read-only")  # no terminal to ask: the safe default refuses every write


@dataclass(frozen=True)
class ServeOptions:
    """`fugu serve` flags. The key: `api_key`, else the variable `api_key_env` names, else FUGU_SERVE_KEY;
    none of them: no authentication (loopback only is the default)."""

    run: RunOptions = field(
        default_factory=_read_only
    )  # the repository (its cwd), pool, router, mode, limits
    host: str = "127.0.0.1"
    port: int = 8787
    api_key: str | None = None
    api_key_env: str | None = None
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call (none by default)
    turn_threads: int = 32  # agent turns and pass-through calls running at once; more wait their turn
    backlog: int = 2048  # connections the kernel queues before the server accepts them
    idle_timeout_s: float = 15.0  # an idle keep-alive connection is closed after this long
    header_timeout_s: float = (
        10.0  # a request's headers must arrive within this (slowloris); else 408, closed
    )
    body_timeout_s: float = 60.0  # and its body within this once they have
    max_live_sessions: int = 64  # agent sessions kept in memory; older ones are reloaded from the store
    response_ttl_s: float = 30 * 86400.0  # stored Responses (`store`) are kept this long, as OpenAI's are

    def key(self) -> str | None:
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if not value:
                raise ConfigError(f"--api-key-env {self.api_key_env}: {self.api_key_env} is not set")
            return value
        return os.environ.get("FUGU_SERVE_KEY") or None

    def allowed_hosts(self) -> frozenset[str] | None:
        """Host header names a request may carry (DNS rebinding: a browser sends the attacker's name).
        None: any, when listening on every address (a key is then the protection)."""
        host = self.host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            return None
        names = {host.lower()}
        if _is_loopback(host):
            names |= LOOPBACK_NAMES
        return frozenset(names)

    @property
    def loopback_only(self) -> bool:
        return _is_loopback(self.host.strip("[]"))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
