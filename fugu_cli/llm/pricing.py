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
    """Adds `cost_usd` to usage; the first time a model has no known price (per process), also a warning."""

    def __init__(self, litellm: Callable[[], Any]) -> None:
        self._litellm = litellm

    def cost(self, worker: Worker, usage: Usage) -> tuple[Usage, str | None]:
        cost = price_from_worker(worker, usage)
        warning = None
        if cost is None:
            cost, warning = self._table_cost(worker, usage)
        return replace(usage, cost_usd=cost), warning

    def _table_cost(self, worker: Worker, usage: Usage) -> tuple[float, str | None]:
        try:
            cost_in, cost_out = self._litellm().cost_per_token(
                model=worker.model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
            return float(cost_in) + float(cost_out), None
        except Exception:
            with _warned_lock:
                first = worker.model not in _warned
                _warned.add(worker.model)
            return 0.0, unknown_price_warning(worker) if first else None
