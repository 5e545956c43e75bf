"""What a completion cost: the worker's own prices when set, else litellm's table, else $0 with one warning.

Unknown prices never raise. litellm comes in as a loader callable, so this module never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fugu_cli.types import Usage, Worker

_warned: set[str] = set()
_warned_lock = threading.Lock()


def price_from_worker(worker: Worker, usage: Usage) -> float | None:
    """USD from the worker's per-million prices; None when it has none."""
    if worker.price_in is None and worker.price_out is None:
        return None
    cost_in = usage.prompt_tokens * (worker.price_in or 0.0)
    cost_out = usage.completion_tokens * (worker.price_out or 0.0)
    return (cost_in + cost_out) / 1_000_000


def unknown_price_warning(worker: Worker) -> str:
    return (
        f"no price known for model {worker.model} (worker {worker.name}); its cost counts as $0. "
        "Set price_in/price_out (USD per million tokens) for the worker to track it."
    )


class PriceBook:
    """Adds `cost_usd` to usage. Warns once per model per process through `warn`."""

    def __init__(self, warn: Callable[[str], None], litellm: Callable[[], Any]) -> None:
        self._warn = warn
        self._litellm = litellm

    def cost(self, worker: Worker, usage: Usage) -> Usage:
        cost = price_from_worker(worker, usage)
        if cost is None:
            cost = self._table_cost(worker, usage)
        return replace(usage, cost_usd=cost)

    def _table_cost(self, worker: Worker, usage: Usage) -> float:
        try:
            cost_in, cost_out = self._litellm().cost_per_token(
                model=worker.model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
            return float(cost_in) + float(cost_out)
        except Exception:
            with _warned_lock:
                first = worker.model not in _warned
                _warned.add(worker.model)
            if first:
                self._warn(unknown_price_warning(worker))
            return 0.0
