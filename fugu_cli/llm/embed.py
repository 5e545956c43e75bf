"""Embeddings from a worker that declares an embedding model (`embedding_model` in the pool): an OpenAI-
compatible endpoint (`openai/...`) is posted to directly, any other provider goes through litellm. The
reply is OpenAI's `list` of `embedding` objects with usage. One attempt a call, its failure a ProviderError
classified as a chat attempt's is (the caller retries through the worker-call service). Never prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fugu_cli.errors import ProviderError
from fugu_cli.llm.client import ClientConfig, endpoint, load_litellm
from fugu_cli.llm.direct import OPENAI_BASE, DirectClient
from fugu_cli.llm.faults import attempt_error
from fugu_cli.types import Worker

# What a client may send besides the input: passed as they are.
PARAMS = ("encoding_format", "dimensions", "user")


def embed(
    worker: Worker,
    params: Mapping[str, Any],
    config: ClientConfig,
    direct: DirectClient,
) -> dict[str, Any]:
    """`params`: `input` and the PARAMS the client gave. Raises ProviderError when the attempt fails."""
    model = worker.embedding_model
    if model is None:
        raise ValueError(f"worker {worker.name} declares no embedding model")
    where = endpoint(worker)
    body = {k: params[k] for k in ("input", *PARAMS) if params.get(k) is not None}

    try:
        if model.startswith("openai/"):
            base = str(where.get("api_base") or OPENAI_BASE).rstrip("/")
            reply: Mapping[str, Any] = direct.post(
                f"{base}/embeddings", body | {"model": model.removeprefix("openai/")}, where.get("api_key")
            )
        else:
            raw = load_litellm().embedding(model=model, timeout=config.timeout_s, **where, **body)
            reply = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw)
    except ProviderError:
        raise
    except Exception as exc:
        raise attempt_error(worker, exc, config.timeout_s) from exc
    return _openai_shape(reply, model)


def _openai_shape(reply: Mapping[str, Any], model: str) -> dict[str, Any]:
    data = []
    for i, item in enumerate(reply.get("data") or ()):
        item = item if isinstance(item, dict) else dict(item)
        data.append(
            {"object": "embedding", "index": item.get("index", i), "embedding": item.get("embedding")}
        )
    usage = dict(reply.get("usage") or {})
    prompt = int(usage.get("prompt_tokens") or 0)
    return {
        "object": "list",
        "data": data,
        "model": reply.get("model") or model,
        "usage": {"prompt_tokens": prompt, "total_tokens": int(usage.get("total_tokens") or prompt)},
    }
