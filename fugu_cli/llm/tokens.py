"""Token accounting per worker: each worker's tokenizer family, window and output reserve, and message counts
cached per message (the transcript only grows, so a step costs the new messages, not the whole history).

`LiteLLMTokens` counts with litellm's `token_counter` (litellm comes in through `load_litellm`, never at
import; windows come from litellm's table through modelinfo.py's cache); `CharTokens` is the approximation
(four characters a token) that scripted runs use. `at_most` bounds any of their counts from above without a
tokenizer, so a request that plainly fits needs no count at all. Never prints.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fugu_cli.llm.modelinfo import ModelInfo, litellm_tokenizer, tiktoken_counter
from fugu_cli.types import Message, Worker

DEFAULT_WINDOW = 32_768  # a model litellm does not know and the pool gives no context_limit for
DEFAULT_RESERVE = 4_096
MAX_RESERVE = 8_192
MESSAGE_OVERHEAD = 4  # role and separators around every chat message
# What one image costs a request, counted before it is sent: about the most Anthropic (1,600 for a 1.15
# megapixel image) and OpenAI (about 1,100 at high detail) charge for one, so a request with images fits.
IMAGE_TOKENS = 1_600
CACHE_SIZE = 50_000
# Every tokenizer fugu counts with (tiktoken's and the byte-level BPE ones litellm ships, or four characters
# a token) gives each token at least one byte of the text; a tokenizer may add a start and an end token.
BOUND_SLACK = 2


def at_most(text: str) -> int:
    """An upper bound of `text`'s token count in any tokenizer fugu counts with: its UTF-8 bytes + 2."""
    return len(text.encode("utf-8", "surrogatepass")) + BOUND_SLACK


def message_bound(message: Message) -> int:
    """An upper bound of `TokenCounter.message` for any counter (see `at_most`)."""
    return at_most(message_text(message)) + MESSAGE_OVERHEAD + IMAGE_TOKENS * len(message.images)


def tools_bound(tools: Sequence[Mapping[str, Any]]) -> int:
    """An upper bound of `TokenCounter.tools` for any counter."""
    return at_most(_schemas_text(tools)) if tools else 0


@dataclass(frozen=True)
class Window:
    """A worker's context window: `tokens` in all, `reserve` of them kept for the reply."""

    tokens: int
    reserve: int
    source: str  # pool | litellm | default

    @property
    def usable(self) -> int:
        """The most prompt tokens a request may carry."""
        return self.tokens - self.reserve

    def to_json(self) -> dict[str, Any]:
        return {"context_window": self.tokens, "output_reserve": self.reserve, "window_source": self.source}


class TokenCounter(Protocol):
    """What the agent, the compactor and the repo map count with."""

    def family(self, worker: Worker) -> str:
        """The worker's tokenizer family (workers of one family share counts)."""
        ...

    def window(self, worker: Worker) -> Window: ...

    def message(self, worker: Worker, message: Message) -> int:
        """Tokens of one message as sent to `worker` (cached)."""
        ...

    def text(self, worker: Worker | None, text: str) -> int:
        """Tokens of a plain text (not cached)."""
        ...

    def tools(self, worker: Worker, tools: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of the tool schemas sent with every request (cached per family)."""
        ...

    def sees_images(self, worker: Worker) -> bool:
        """Whether `worker` accepts image parts: the pool's `vision`, else its model's entry in the table."""
        ...


def request_tokens(
    counter: TokenCounter, worker: Worker, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]]
) -> int:
    """Tokens a request of `messages` and `tools` carries to `worker`."""
    return sum(counter.message(worker, m) for m in messages) + counter.tools(worker, tools) + 3


def message_text(message: Message) -> str:
    """Everything of a message that reaches the model as tokens."""
    parts = [message.content or ""]
    parts += [f"{t.name} {t.arguments}" for t in message.tool_calls]
    if message.name:
        parts.append(message.name)
    return "\n".join(p for p in parts if p)


def _schemas_text(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), sort_keys=True) if tools else ""


class _Counts:
    """A bounded cache of message counts per tokenizer family. Keys hold the message itself (frozen, so
    hashable): an equal message read back from the store counts once more, then hits."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._data: OrderedDict[tuple[str, Message], int] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, family: str, message: Message, count: Callable[[], int]) -> int:
        key = (family, message)
        with self._lock:
            found = self._data.get(key)
            if found is not None:
                self._data.move_to_end(key)
                return found
        value = count()
        with self._lock:
            self._data[key] = value
            if len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


def reserve_for(window: int, max_output: int | None, configured: int | None = None) -> int:
    """The output reserve: the configured one, else the model's max output, capped so small windows keep
    three quarters of themselves for the prompt."""
    wanted = configured if configured is not None else min(max_output or DEFAULT_RESERVE, MAX_RESERVE)
    return max(256, min(wanted, window // 4 if configured is None else window // 2))


class CharTokens:
    """Four characters a token; windows from the pool's `context_limit` or the default. For scripted runs."""

    def __init__(self, reserve: int | None = None) -> None:
        self._reserve = reserve

    def family(self, worker: Worker) -> str:
        return "chars"

    def window(self, worker: Worker) -> Window:
        size = worker.context_limit or DEFAULT_WINDOW
        return Window(
            size, reserve_for(size, None, self._reserve), "pool" if worker.context_limit else "default"
        )

    def message(self, worker: Worker, message: Message) -> int:
        return len(message_text(message)) // 4 + MESSAGE_OVERHEAD + IMAGE_TOKENS * len(message.images)

    def text(self, worker: Worker | None, text: str) -> int:
        return len(text) // 4

    def tools(self, worker: Worker, tools: Sequence[Mapping[str, Any]]) -> int:
        return len(_schemas_text(tools)) // 4

    def sees_images(self, worker: Worker) -> bool:
        return bool(worker.vision)


class LiteLLMTokens:
    """Counts with litellm's tokenizer for each worker's model (tiktoken's encodings ship with litellm, so
    nothing is downloaded); windows from the pool's `context_limit`, else litellm's model table."""

    def __init__(
        self, litellm: Callable[[], Any], reserve: int | None = None, model_info: Path | None = None
    ) -> None:
        """`model_info`: where litellm's answers about windows are kept between runs (None: not kept)."""
        self._litellm = litellm
        self._info = ModelInfo(litellm, model_info)
        self._cache_dir = model_info.parent if model_info else None
        self._reserve = reserve
        self._counts = _Counts()
        self._families: dict[str, tuple[str, Any]] = {}
        self._windows: dict[Worker, Window] = {}
        self._tools: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def family(self, worker: Worker) -> str:
        return self._tokenizer(worker.model)[0]

    def window(self, worker: Worker) -> Window:
        found = self._windows.get(worker)
        if found is None:
            found = self._windows[worker] = self._lookup_window(worker)
        return found

    def message(self, worker: Worker, message: Message) -> int:
        family, encode = self._tokenizer(worker.model)
        extra = MESSAGE_OVERHEAD + IMAGE_TOKENS * len(message.images)
        return self._counts.get(family, message, lambda: encode(message_text(message)) + extra)

    def text(self, worker: Worker | None, text: str) -> int:
        return int(self._tokenizer(worker.model if worker else "gpt-4")[1](text))

    def tools(self, worker: Worker, tools: Sequence[Mapping[str, Any]]) -> int:
        family, encode = self._tokenizer(worker.model)
        text = _schemas_text(tools)
        key = (family, text)
        if key not in self._tools:
            self._tools[key] = int(encode(text)) if tools else 0
        return self._tools[key]

    def sees_images(self, worker: Worker) -> bool:
        if worker.vision is not None:
            return worker.vision
        return bool(self._info.get(worker.model).get("supports_vision"))

    def _tokenizer(self, model: str) -> tuple[str, Callable[[str], int]]:
        with self._lock:
            found = self._families.get(model)
            if found is None:
                found = self._families[model] = self._select(model)
        return found

    def _select(self, model: str) -> tuple[str, Callable[[str], int]]:
        """litellm's choice of tokenizer for `model` (remembered on disk); a tiktoken one is loaded without
        importing litellm."""
        family = self._info.get(model).get("tokenizer")
        if isinstance(family, str) and family.startswith("tiktoken:"):
            counter = tiktoken_counter(family.split(":", 1)[1], self._cache_dir)
            if counter is not None:
                return family, counter
        return litellm_tokenizer(self._litellm(), model)

    def _lookup_window(self, worker: Worker) -> Window:
        if worker.context_limit and self._reserve is not None:  # nothing to ask litellm's table
            size = worker.context_limit
            return Window(size, reserve_for(size, None, self._reserve), "pool")
        info = self._info.get(worker.model)
        max_output, max_input = info.get("max_output_tokens"), info.get("max_input_tokens")
        if worker.context_limit:
            size, source = worker.context_limit, "pool"
        elif max_input:
            # some providers' replies come on top of max_input_tokens, others' not: assume not
            size, source = max_input, "litellm"
        else:
            size, source = DEFAULT_WINDOW, "default"
        return Window(size, reserve_for(size, max_output, self._reserve), source)
