"""The one error tree. Each message says what the user can do about it; `exit_code` is what the CLI
returns."""

from __future__ import annotations


class FuguError(Exception):
    """Base of all errors fugu raises on purpose."""

    exit_code = 1


class UsageError(FuguError):
    """A user's mistake: a bad flag, a bad file, a missing key. Exit 2."""

    exit_code = 2


class ConfigError(UsageError):
    """Configuration that cannot be read or makes no sense."""


class NoWorkerError(UsageError):
    """The pool has no usable worker."""


class ProviderError(FuguError):
    """A worker's call failed. `retryable`: another attempt at the same worker may succeed;
    `retry_after_s`: the provider said how long to wait; `code` and `status`: the provider's own error code
    and HTTP status, passed on unchanged (serve's clients read them)."""

    def __init__(
        self,
        message: str,
        *,
        worker: str = "",
        retryable: bool = True,
        retry_after_s: float | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.worker = worker
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.code = code
        self.status = status

    @property
    def blames_worker(self) -> bool:
        """Whether the worker is at fault (down, silent, refusing our key), not the request it was given:
        only such failures make a worker cool down."""
        return True


class RequestRejected(ProviderError):
    """The worker refused the request itself (HTTP 400-class: a parameter it cannot take, a bad schema, a
    prompt too long): retrying it is pointless, and the worker is not to blame. `param` names the parameter
    when the refusal says which."""

    def __init__(
        self,
        message: str,
        *,
        worker: str = "",
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, worker=worker, retryable=False, code=code, status=status)
        self.param = param

    @property
    def blames_worker(self) -> bool:
        return False


class ContextOverflow(RequestRejected):
    """The provider said the request does not fit the worker's context window: compact and retry, never fail
    over blindly (the next worker would overflow too)."""

    def __init__(
        self,
        message: str,
        *,
        worker: str = "",
        code: str | None = "context_length_exceeded",
        status: int | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message, worker=worker, param=param, code=code, status=status)


class ToolArgumentError(FuguError):
    """A model's tool call that cannot run: unknown tool, invalid JSON, wrong types. Becomes a tool result."""


class PathOutsideRepoError(ToolArgumentError):
    """A path that resolves outside the repository."""


class Interrupted(FuguError):
    """The user interrupted. Exit 130."""

    exit_code = 130
