"""What a completion cost: the worker's own prices when set, else litellm's table, else $0 with one warning.
Cached input tokens (a provider's prompt cache) cost the cached price, not the full input price.

Unknown prices never raise. litellm comes in as a loader callable, so this module never imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fugu_cli.llm.modelinfo import ModelInfo, linear_cost, local_cost
from fugu_cli.types import Usage, Worker

_warned: set[str] = set()
_warned_lock = threading.Lock()


def price_from_worker(worker: Worker, usage: Usage, cached_price: float | None = None) -> float | None:
    """USD from the worker's per-million prices; None when it has none. Cached input tokens cost
    `cached_price` (default: the worker's `price_cached`, else its input price: no discount is known)."""
    if worker.price_in is None and worker.price_out is None:
        return None
    price_in = worker.price_in or 0.0
    if cached_price is None:
        cached_price = worker.price_cached if worker.price_cached is not None else price_in
    price_out = worker.price_out or 0.0
    tokens = (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens)
    return linear_cost(*tokens, price_in, price_out, cached_price) / 1_000_000


def unknown_price_warning(worker: Worker) -> str:
    return (
        f"no price known for model {worker.model} (worker {worker.name}); its cost counts as $0. "
        "Set price_in/price_out (USD per million tokens) for the worker to track it."
    )


def no_usage_warning(worker: Worker) -> str:
    return (
        f"worker {worker.name} reported no token counts (its server sent no usage), so its tokens and cost "
        "count as 0; a server that honours stream_options.include_usage reports them."
    )


def _own_prices(worker: Worker) -> Worker:
    """The worker as its replies are priced: prices filled in from litellm's table for the router
    (`table_prices`) are left to the table, which knows its price tiers."""
    if not worker.table_prices:
        return worker
    return replace(worker, price_in=None, price_out=None, price_cached=None, table_prices=False)


def _free(worker: Worker) -> bool:
    return worker.price_in == 0 and worker.price_out == 0


def _once(key: str, warning: str) -> str | None:
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    return warning if first else None


class PriceBook:
    """Adds `cost_usd` to usage; the first time a model has no known price (per process), also a warning.

    With `info` (litellm's answers kept on disk, modelinfo.py), a model litellm's table does not price is
    known as such without importing litellm (seconds and 150 MiB a run, for every worker a local server runs
    under a name of its own), and a model it prices by the token is priced as it would price it (its
    `unit_price`), also without it."""

    def __init__(self, litellm: Callable[[], Any], info: ModelInfo | None = None) -> None:
        self._litellm = litellm
        self._info = info

    def needs_table(self, worker: Worker) -> bool:
        """Whether pricing a reply of `worker` needs litellm: it has no prices of its own, and nothing kept
        says that litellm's table lacks them or how to price them without it (`unit_price`; a prompt past
        the size that was checked for still asks litellm, when its reply comes)."""
        worker = _own_prices(worker)
        if worker.price_in is not None or worker.price_out is not None:
            return False
        kept = self._info.cached(worker.model) if self._info is not None else None
        return kept is None or (kept["price"] is not None and kept["unit_price"] is None)

    def may_need_table(self, worker: Worker) -> bool:
        """`needs_table`, or a reply of `worker` may still need litellm: its model has a price tier, and a
        prompt past it is priced by litellm (serve imports litellm up front for such a pool, so that no reply
        waits seconds for the import in its event loop)."""
        worker = _own_prices(worker)
        if worker.price_in is not None or worker.price_out is not None:
            return False
        kept = self._info.cached(worker.model) if self._info is not None else None
        if kept is None or kept["price"] is None:
            return kept is None  # nothing kept: litellm is asked; kept as unpriced: it is not
        unit = kept["unit_price"]
        return not isinstance(unit, list) or unit[3] is not None

    def cost(self, worker: Worker, usage: Usage) -> tuple[Usage, str | None]:
        worker = _own_prices(worker)
        cached_price = None
        if worker.price_cached is None and worker.price_in is not None and usage.cached_tokens:
            cached_price = worker.price_in * self._cached_ratio(worker.model)
        cost = price_from_worker(worker, usage, cached_price)
        warning = None
        if cost is None:
            cost, warning = self._table_cost(worker, usage)
        if warning is None and not usage.prompt_tokens and not usage.completion_tokens and not _free(worker):
            warning = _once(f"usage:{worker.name}", no_usage_warning(worker))
        return replace(usage, cost_usd=cost), warning

    def _cached_ratio(self, model: str) -> float:
        """The model's cached-input price over its input price in litellm's table (1.0 when unknown)."""
        try:
            if self._info is not None:
                kept = self._info.get(model)
                ratio = float(kept["cached_price"]) / float(kept["price"][0])
            else:
                info = self._litellm().get_model_info(model)
                ratio = float(info["cache_read_input_token_cost"]) / float(info["input_cost_per_token"])
        except Exception:
            return 1.0
        return ratio if 0 < ratio <= 1 else 1.0

    def _table_cost(self, worker: Worker, usage: Usage) -> tuple[float, str | None]:
        if self._info is not None:
            kept = self._info.get(worker.model)
            if kept["price"] is None:
                return 0.0, _once(worker.model, unknown_price_warning(worker))
            cached = min(usage.cached_tokens, usage.prompt_tokens)
            cost = local_cost(kept["unit_price"], usage.prompt_tokens, usage.completion_tokens, cached)
            if cost is not None:  # litellm's own prices for this model, as its cost_per_token applies them
                return cost, None
        try:
            cost_in, cost_out = self._litellm().cost_per_token(
                model=worker.model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cache_read_input_tokens=min(usage.cached_tokens, usage.prompt_tokens),
            )
            return float(cost_in) + float(cost_out), None
        except Exception:
            return 0.0, _once(worker.model, unknown_price_warning(worker))
