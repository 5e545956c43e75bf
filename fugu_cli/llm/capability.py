"""What a worker's provider takes beyond the common chat parameters, read from litellm's tables: the optional
parameters a client asked for (a reasoning effort, a prompt-cache key, a native web search) are sent to the
workers that have them and left out, named, for the others.

litellm is reached through `load_litellm` only; answers are cached per model. Never prints.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from fugu_cli.llm.client import load_litellm
from fugu_cli.types import Worker

# Parameters a provider may list as accepted that still need the model itself to have the feature.
_NEEDS = {"reasoning_effort": "supports_reasoning", "web_search_options": "supports_web_search"}


def fit(worker: Worker, optional: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(the optional parameters `worker` takes, the names of those it does not)."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for name, value in optional.items():
        if supports(worker, name):
            kept[name] = value
        else:
            dropped.append(name)
    return kept, tuple(dropped)


def supports(worker: Worker, param: str) -> bool:
    return _supports(worker.model, param)


@functools.lru_cache(maxsize=1024)
def _supports(model: str, param: str) -> bool:
    litellm = load_litellm()
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        accepted = litellm.get_supported_openai_params(model=name, custom_llm_provider=provider) or []
    except Exception:  # a model litellm cannot place: only what every chat API takes
        return False
    if param not in accepted:
        return False
    check = _NEEDS.get(param)
    if check is None:
        return True
    try:
        return bool(getattr(litellm, check)(model=name, custom_llm_provider=provider))
    except Exception:
        return False
