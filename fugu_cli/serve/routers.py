"""One router for the whole server. A router's state is caches keyed by content (message vectors, worker
descriptions), so every session and every pass-through call can share one, and the learned router's set-up
(encoding the known workers' descriptions) is paid once instead of per session. Decisions take turns on a
lock: they are CPU work, and its caches are not thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from fugu_cli.app import RouterSource
from fugu_cli.router import Router
from fugu_cli.types import RouteDecision, RouteState, Stop, Worker


class _Locked:
    def __init__(self, router: Router) -> None:
        self.router = router
        self.name = router.name
        self.has_roles = bool(getattr(router, "has_roles", False))
        self._lock = threading.Lock()

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        with self._lock:
            return self.router.pick(state, pool)

    def escalate(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision | Stop:
        with self._lock:
            return self.router.escalate(state, pool)


class SharedRouter(RouterSource):
    """A `RouterSource` whose `make` gives every caller the same (locked) router."""

    def __init__(self, source: RouterSource) -> None:
        super().__init__(source.checkpoint, source.cost_weight)
        self._source = source
        self._one: _Locked | None = None
        self._making = threading.Lock()

    def make(self) -> Router:
        with self._making:
            if self._one is None:
                self._one = _Locked(self._source.make())
            return self._one
