"""OpenAI's endpoints beside chat completions and responses: `POST /v1/embeddings`, sent to a worker that
declares an embedding model (`embedding_model` in the pool), and the legacy `POST /v1/completions`, refused
with what to use instead (fugu's workers are chat models: a raw prompt to continue is not what they do).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fugu_cli.calls import Call, Exclusions
from fugu_cli.llm.embed import PARAMS, embed
from fugu_cli.serve.routes import _blocking, _hub, openai_errors, read_json
from fugu_cli.serve.wire import ApiError, bad_param
from fugu_cli.types import RouteDecision, Worker

HOW_TO_DECLARE = (
    'declare one on a worker of the pool: embedding_model = "openai/text-embedding-3-small" (the litellm id '
    "of an embedding model that worker's endpoint serves)"
)


def pick(pool: tuple[Worker, ...] | list[Worker], model: str) -> Worker:
    """The worker that answers embeddings for `model`: `fugu` (the highest-priority worker that declares
    embeddings), `fugu/<worker>`, or the embedding model's own id."""
    declared = sorted((w for w in pool if w.embedding_model), key=lambda w: -w.priority)
    name = model.removeprefix("openai/") if model.startswith("openai/fugu") else model
    if name == "fugu" and declared:
        return declared[0]
    if name.startswith("fugu/"):
        found = next((w for w in pool if w.name == name.removeprefix("fugu/")), None)
        if found is not None and found.embedding_model:
            return found
        raise ApiError(
            404,
            f"worker {name.removeprefix('fugu/')} serves no embeddings: {HOW_TO_DECLARE}",
            code="model_not_found",
            param="model",
        )
    for w in declared:
        assert w.embedding_model is not None
        if name in (w.embedding_model, w.embedding_model.split("/", 1)[-1]):
            return w
    if not declared:
        raise ApiError(
            404,
            f"no worker of fugu's pool serves embeddings: {HOW_TO_DECLARE}",
            code="model_not_found",
            param="model",
        )
    known = ", ".join(
        ["fugu", *(f"fugu/{w.name}" for w in declared), *(str(w.embedding_model) for w in declared)]
    )
    raise ApiError(
        404,
        f"The model {model!r} does not exist for embeddings: use {known}",
        code="model_not_found",
        param="model",
    )


@openai_errors
async def embeddings(request: Request) -> Response:
    hub = _hub(request)
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param(
            "model", "missing 'model': use fugu, fugu/<worker> or an embedding model's id", "missing"
        )
    _check_input(body.get("input"))
    unknown = [k for k, v in body.items() if k not in ("model", "input", *PARAMS) and v is not None]
    if unknown:
        raise bad_param(unknown[0], f"/v1/embeddings does not take '{unknown[0]}'", "unsupported_parameter")
    resolved = await _blocking(request, hub.resolved)
    worker = pick(resolved.pool, model)
    forwarder = hub.forwarder

    def route(ex: Exclusions) -> RouteDecision:
        if worker.name in ex.failed or worker.name in ex.cooling:
            raise LookupError("the embedding worker failed")
        return RouteDecision(worker.name, {}, "override", 0.0, reason="embeddings")

    with hub.running() as cancel:
        call = Call(
            pool=(worker,),
            route=route,
            send=lambda attempt: embed(attempt.worker, body, forwarder.config, forwarder.direct),
            cancel=cancel,
        )  # retries and the worker's health as for chat calls; no ledger row (embeddings have no session)
        answer = await _blocking(request, lambda: resolved.worker_call().run(call), cancel)
    reply = answer.value
    return JSONResponse(reply | {"fugu": {"worker": worker.name, "model": worker.embedding_model}})


def _check_input(raw: Any) -> None:
    ok = isinstance(raw, str) and raw != ""
    ok = ok or (isinstance(raw, list) and bool(raw) and all(isinstance(x, (str, int, list)) for x in raw))
    if not ok:
        raise bad_param("input", "'input' must be a non-empty string or a list of strings (or token arrays)")


@openai_errors
async def completions(request: Request) -> Response:
    raise ApiError(
        404,
        "fugu serve has no legacy completions endpoint: its workers are chat models, which answer messages "
        "rather than continue a raw prompt. Send the prompt as a user message to /v1/chat/completions or "
        "/v1/responses (model fugu, or fugu-agent for fugu's own agent).",
        code="unsupported_endpoint",
    )


def routes() -> list[Route]:
    out = []
    for prefix in ("/v1", ""):
        out += [
            Route(f"{prefix}/embeddings", embeddings, methods=["POST"]),
            Route(f"{prefix}/completions", completions, methods=["POST"]),
        ]
    return out
