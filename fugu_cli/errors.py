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
    """A provider failed after retries (rate limit, server error, timeout, malformed reply)."""

    def __init__(self, message: str, *, worker: str = "", retryable: bool = True) -> None:
        super().__init__(message)
        self.worker = worker
        self.retryable = retryable


class ContextOverflow(ProviderError):
    """The provider said the request does not fit the worker's context window: compact and retry, never fail
    over blindly (the next worker would overflow too)."""

    def __init__(self, message: str, *, worker: str = "") -> None:
        super().__init__(message, worker=worker, retryable=False)


class ToolArgumentError(FuguError):
    """A model's tool call that cannot run: unknown tool, invalid JSON, wrong types. Becomes a tool result."""


class PathOutsideRepoError(ToolArgumentError):
    """A path that resolves outside the repository."""


class Interrupted(FuguError):
    """The user interrupted. Exit 130."""

    exit_code = 130
