"""What a failed attempt at a worker means: litellm's, the OpenAI SDK's, urllib3's (through direct.py) and our
own exceptions mapped onto one `ProviderError` that says whether another attempt may help, how long the
provider asked us to wait, whose fault it was (the worker's, or the request's: `RequestRejected`) and the
provider's own error code and HTTP status, unchanged.

Decides nothing about retrying: that is the worker-call service's (fugu_cli/calls). Never imports litellm.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from fugu_cli.errors import ContextOverflow, ProviderError, RequestRejected
from fugu_cli.llm.parse import MalformedReply, WrongEndpoint
from fugu_cli.types import Worker

# How providers (and the servers behind OpenAI-compatible endpoints) say a prompt is too long, for the ones
# litellm does not map to ContextWindowExceededError itself.
_CONTEXT_PHRASES = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "exceeds the context",
    "context length",
)
_PARAMS = re.compile(r"parameters?:?\s*\[([^\]]*)\]")
# litellm wraps a provider's words in its own names ("litellm.ServiceUnavailableError:
# ServiceUnavailableError: OpenAIException - upstream is down"); the user needs the provider's reason first.
_WRAPPERS = re.compile(r"^(?:(?:litellm\.)?\w+(?:Error|Exception)(?::| -)\s*)+")


@dataclass(frozen=True)
class Fault:
    cause: str
    retryable: bool
    retry_after_s: float | None = None
    context: bool = False  # the request does not fit the worker's window
    rejected: bool = False  # the worker refused this request (400-class): the request's fault


def attempt_error(worker: Worker, exc: BaseException, timeout_s: float) -> ProviderError:
    """The `ProviderError` one failed attempt at `worker` stands for (its cause chained by the caller)."""
    if isinstance(exc, ProviderError):
        return exc
    fault = classify(exc, timeout_s)
    status = _status(exc)
    cause = fault.cause
    if worker.api_key_env and (status == 401 or type(exc).__name__ == "AuthenticationError"):
        cause += f"; check the key in {worker.api_key_env}"  # which of the user's keys was refused
    text = describe(worker, cause)
    code = error_code(exc)
    if fault.context:
        return ContextOverflow(
            text, worker=worker.name, status=status, code=code or "context_length_exceeded"
        )
    if fault.rejected:
        return RequestRejected(text, worker=worker.name, param=_param(exc), code=code, status=status)
    return ProviderError(
        text,
        worker=worker.name,
        retryable=fault.retryable,
        retry_after_s=fault.retry_after_s,
        code=code,
        status=status,
    )


def classify(exc: BaseException, timeout_s: float) -> Fault:
    """Maps litellm's (and the OpenAI SDK's) exceptions onto retry categories."""
    if isinstance(exc, MalformedReply):
        return Fault(f"malformed reply: {exc}", retryable=True)
    if isinstance(exc, WrongEndpoint):
        return Fault(first_line(exc), retryable=False)
    name = type(exc).__name__
    status = _status(exc)
    if name == "ContextWindowExceededError" or (
        (status in (400, 413, 422) or name.startswith("BadRequest"))
        and any(p in str(exc).lower() for p in _CONTEXT_PHRASES)
    ):
        cause = f"the request does not fit the context window: {first_line(exc)}"
        return Fault(cause, False, context=True, rejected=True)
    if name in ("Timeout", "APITimeoutError") or isinstance(exc, TimeoutError):
        return Fault(f"timed out after {timeout_s:g} s", retryable=True)
    if name == "UnsupportedParamsError":
        return Fault(first_line(exc), retryable=False, rejected=True)
    if isinstance(status, int) and 300 <= status < 400:  # a moved endpoint: another try moves nothing
        return Fault(f"{_status_text(status)}{first_line(exc)}", retryable=False)
    if name.startswith("BadRequest") or status in (400, 413, 422):
        return Fault(f"{_status_text(status)}{first_line(exc)}", retryable=False, rejected=True)
    if name in ("AuthenticationError", "PermissionDeniedError", "NotFoundError"):
        return Fault(f"{_status_text(status)}{first_line(exc)}", retryable=False)
    if name == "APIConnectionError" or isinstance(exc, ConnectionError):
        return Fault(f"connection failed: {first_line(exc)}", retryable=True)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409, 429):
        return Fault(f"{_status_text(status)}{first_line(exc)}", retryable=False)
    if status == 429 or name == "RateLimitError":
        return Fault("rate limited (429)", retryable=True, retry_after_s=_retry_after(exc))
    if isinstance(status, int) and status >= 500:
        return Fault(
            f"server error {status}: {first_line(exc)}", retryable=True, retry_after_s=_retry_after(exc)
        )
    return Fault(f"malformed reply: {first_line(exc)}", retryable=True)


def error_code(exc: BaseException | None) -> str | None:
    """The provider's own error code (`context_length_exceeded`, `rate_limit_exceeded`, ...), if any."""
    if exc is None:
        return None
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("code"), str):
            return str(inner["code"])
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else None


def _param(exc: BaseException | None) -> str | None:
    """The parameter a refusal names: the provider's `param` field, or litellm's "parameters: ['x']"."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("param"), str):
            return str(inner["param"])
    found = _PARAMS.search(str(exc))
    if found:
        names = [n.strip(" '\"") for n in found.group(1).split(",") if n.strip(" '\"")]
        return names[0] if names else None
    return None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _retry_after(exc: BaseException) -> float | None:
    headers: Any = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        headers = getattr(exc, "litellm_response_headers", None)
    value = headers.get("retry-after") if headers else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return parsedate_to_datetime(str(value)).timestamp() - time.time()
        except (TypeError, ValueError):
            return None


def _status_text(status: object) -> str:
    return f"HTTP {status}: " if isinstance(status, int) else ""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (_WRAPPERS.sub("", text).strip() or text)[:300]


def describe(worker: Worker, cause: str) -> str:
    return f"worker {worker.name} ({worker.model}): {cause}"
