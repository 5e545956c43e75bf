"""Session features: a transcript of Messages -> one unit vector [H] for the selection head.

Each message is encoded once, on its own, as its plain `role: content` line, and cached by a hash of that
line and its token limit; a decision therefore encodes only the messages that are new since the last one (in
one forward pass, whatever their limits), so its cost stays flat as the session grows (for decoders too: each
line's vector is the hidden state at its second-to-last token, which needs no KV cache and survives
trimming). The vectors are combined as

    h = normalize(0.5·task + 0.25·mean(last 8 messages) + 0.25·last message)

where `task` is the first user message. System messages are skipped: they are the same for every worker and
long. A transcript holding one user message gives exactly that message's vector, which is what `encode_prompt`
returns, so training on single prompts and serving agree. Imports torch: import lazily.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F

from fugu_cli.router.backbone import Backbone
from fugu_cli.types import Message

FEATURES_VERSION = "task-recent-last/v1"
TASK_WEIGHT, RECENT_WEIGHT, LAST_WEIGHT = 0.5, 0.25, 0.25
DEFAULT_MAX_TOKENS = 128  # user messages and descriptions: the task is what routing reads most
# Assistant and tool messages: their start says what happened, and every step adds them, so they set the
# decision's latency (MiniLM on one thread: about 45 ms for 128 tokens, about 28 ms for 64).
DEFAULT_STEP_TOKENS = 64


class TranscriptEncoder:
    """Caches one vector per message line; `encode` costs a backbone call for the new lines only."""

    def __init__(
        self,
        backbone: Backbone,
        *,
        max_messages: int = 8,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        step_tokens: int = DEFAULT_STEP_TOKENS,
        cache_size: int = 4096,
    ) -> None:
        self.backbone = backbone
        self.max_messages = max_messages
        self.max_tokens = max_tokens
        self.step_tokens = step_tokens
        self.cache_size = cache_size
        self._cache: OrderedDict[bytes, torch.Tensor] = OrderedDict()

    def encode(self, messages: Sequence[Message]) -> torch.Tensor:
        """[H] features of the transcript (zeros when it has no non-system message)."""
        lines, limits = self.window(messages)
        return self.combine(self.lines(lines, limits))

    def window(self, messages: Sequence[Message]) -> tuple[list[str], list[int]]:
        """The lines the features are made of (the task, then the recent messages) and their token limits;
        none when the transcript has no non-system message."""
        msgs = [m for m in messages if m.role != "system"]
        if not msgs:
            return [], []
        task = next((m for m in msgs if m.role == "user"), msgs[0])
        window = [task, *msgs[-self.max_messages :]]
        return [m.as_line() for m in window], [self.limit(m) for m in window]

    def limit(self, message: Message) -> int:
        return self.max_tokens if message.role == "user" else self.step_tokens

    def combine(self, vecs: torch.Tensor) -> torch.Tensor:
        """[1 + R, H] vectors of `window`'s lines -> [H] features (zeros for no lines)."""
        if not len(vecs):
            return torch.zeros(self.backbone.hidden_size)
        h = TASK_WEIGHT * vecs[0] + RECENT_WEIGHT * vecs[1:].mean(0) + LAST_WEIGHT * vecs[-1]
        return F.normalize(h, dim=0)

    def encode_prompt(self, text: str) -> torch.Tensor:
        """[H] features of a transcript holding the single user message `text`."""
        return self.encode([Message(role="user", content=text)])

    def encode_prompts(self, texts: Sequence[str]) -> torch.Tensor:
        """[N, H] `encode_prompt` of each text, with the backbone called once for all the uncached ones."""
        self.lines([Message(role="user", content=t).as_line() for t in texts])
        return torch.stack([self.encode_prompt(t) for t in texts])

    def clear(self) -> None:
        """Forget every cached message vector."""
        self._cache.clear()

    def lines(self, lines: Sequence[str], limits: Sequence[int] | None = None) -> torch.Tensor:
        """[N, H] vectors of `lines` (each cut to its token limit, default `max_tokens`), encoding only those
        not cached, all in one backbone call."""
        limits = limits or [self.max_tokens] * len(lines)
        keys = [_key(line, limit) for line, limit in zip(lines, limits, strict=True)]
        todo: dict[bytes, tuple[str, int]] = {}
        for key, line, limit in zip(keys, lines, limits, strict=True):
            if key not in self._cache:
                todo[key] = (line, limit)
        if todo:
            texts, sizes = zip(*todo.values(), strict=True)
            fresh = self.backbone.encode(list(texts), max_length=list(sizes))
            self._cache.update(zip(todo, fresh, strict=True))
        if not keys:
            return torch.zeros(0, self.backbone.hidden_size)
        out = torch.stack([self._cache[k] for k in keys])
        for k in keys:
            self._cache.move_to_end(k)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return out


def _key(line: str, limit: int) -> bytes:
    return hashlib.blake2b(line.encode(), digest_size=16, person=limit.to_bytes(4, "little")).digest()


def description_text(name: str, description: str, model: str | None = None) -> str:
    """The text a worker's description embedding is computed from; the name stands in for a missing one."""
    return description.strip() or f"{name} {model or ''}".strip()


def describe(
    backbone: Backbone, texts: Sequence[str], *, max_tokens: int = DEFAULT_MAX_TOKENS
) -> torch.Tensor:
    """[W, D] description embeddings (the `desc` input of the head)."""
    return backbone.encode(texts, max_length=max_tokens)


class Described(Protocol):
    """A worker as far as its description embedding goes (a pool Worker or a checkpoint's worker)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def model(self) -> str | None: ...


def description_embeddings(
    backbone: Backbone, workers: Sequence[Described], max_tokens: int = DEFAULT_MAX_TOKENS
) -> torch.Tensor:
    """[W, D] exactly as LearnedRouter computes them for known workers."""
    texts = [description_text(w.name, w.description, w.model) for w in workers]
    return describe(backbone, texts, max_tokens=max_tokens)
