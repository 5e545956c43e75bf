"""LLM access. `LLM` is the seam: the litellm client in production, a scripted one in tests and demos."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from fugu_cli.types import Completion, Message, Worker


class LLM(Protocol):
    def complete(
        self,
        worker: Worker,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        on_text: Callable[[str], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Completion:
        """One chat completion with tool schemas. Retries transient faults itself; after that raises
        `ProviderError`. The returned message has `worker` set to `worker.name`. `on_text` receives streamed
        text deltas when given (the client then streams). `cancel` set means stop as soon as possible
        and raise `Interrupted`."""
        ...

    def warm(self, workers: Sequence[Worker] = ()) -> None:
        """Do slow one-time set-up now for calls to `workers` (all kinds when none are given); the REPL calls
        it in a background thread while the user types."""
        ...
