"""Routers pick the worker for the next step. `Router` is the seam; heavy routers load torch lazily."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fugu_cli.types import RouteDecision, RouteState, Worker


class Router(Protocol):
    name: str

    def pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        """Score every worker in `pool` (all of them, for the record) and choose one not in
        `state.excluded`. Must not raise for an ordinary transcript."""
        ...
