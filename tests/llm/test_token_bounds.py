"""Counting only when it can matter: `at_most` bounds every tokenizer fugu counts with, a request under every
threshold by its bound is decided exactly as a counted one without loading a tokenizer, and litellm's answers
about windows are kept on disk per version of its table."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.context.budget import ContextPolicy, RunningCounts, fit
from fugu_cli.llm.client import load_litellm
from fugu_cli.llm.modelinfo import ModelInfo, table_version, tiktoken_counter
from fugu_cli.llm.tokens import CharTokens, LiteLLMTokens, Window, at_most
from fugu_cli.types import Message, ToolCall, Worker

TEXTS = [
    "",
    " ",
    "hello world",
    "def add(a, b):\n    return a + b\n" * 40,
    "Ünïcode 日本語 한국어 emoji 🐡🐡🐡 and ZWJ 👩‍💻",
    "<|endoftext|> <|im_start|> [CLS] <s></s> special-looking tokens",
    "\t\t\n\n    \r\n" * 30,
    "a" * 5000,
    "".join(chr(c) for c in range(32, 2000)),
]
# one model per tokenizer family litellm selects offline: tiktoken, Anthropic's and DeepSeek's bundled ones
MODELS = ["openai/gpt-4o", "gpt-4", "claude-sonnet-4-5-20250929", "deepseek/deepseek-chat", "ollama/llama3"]


@pytest.mark.parametrize("model", MODELS)
def test_at_most_bounds_every_family_litellm_counts_with(model: str) -> None:
    tokens = LiteLLMTokens(load_litellm)
    worker = Worker("w", model)
    for text in TEXTS:
        assert tokens.text(worker, text) <= at_most(text), (tokens.family(worker), text[:30])
    assert all(CharTokens().text(worker, t) <= at_most(t) for t in TEXTS)


class Exploding:
    """A counter that must not be used: only windows are known (as from the on-disk model table)."""

    def __init__(self, window: int) -> None:
        self.size = window

    def family(self, worker: Worker) -> str:
        raise AssertionError("counted")

    def window(self, worker: Worker) -> Window:
        return Window(worker.context_limit or self.size, 1024, "pool")

    def message(self, worker: Worker, message: Message) -> int:
        raise AssertionError("counted")

    def text(self, worker: Worker | None, text: str) -> int:
        raise AssertionError("counted")

    def tools(self, worker: Worker, tools: Any) -> int:
        raise AssertionError("counted")


TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]


def _transcript(n: int, size: int, seed: int = 0) -> list[Message]:
    rng = random.Random(seed)
    out = [Message("system", "You are fugu."), Message("user", "fix the tests")]
    for i in range(n):
        call = ToolCall(f"c{i}", "shell", json.dumps({"command": f"cat f{i}.py"}))
        out.append(Message("assistant", None, (call,)))
        body = "".join(rng.choice("abc xyz(){}\n日本🐡") for _ in range(rng.randrange(size)))
        out.append(Message("tool", body, tool_call_id=f"c{i}"))
    return out


def test_a_request_under_every_threshold_is_decided_without_counting() -> None:
    workers = [Worker("a", "openai/a", context_limit=200_000), Worker("b", "openai/b", context_limit=32_000)]
    policy = ContextPolicy(Exploding(200_000))  # type: ignore[arg-type]
    got = fit(policy, workers, _transcript(20, 400), TOOLS, running=RunningCounts())
    assert got.masked == {} and set(got.tokens) == {"a", "b"}


@pytest.mark.parametrize("seed", range(6))
def test_bounded_decisions_equal_counted_ones(seed: int) -> None:
    """Masking and the compaction threshold are the same whether the bound skipped the count or not."""
    tokens = LiteLLMTokens(load_litellm)
    policy = ContextPolicy(tokens)
    workers = [
        Worker("tiny", "openai/gpt-4o", context_limit=3_000),
        Worker("small", "claude-sonnet-4-5-20250929", context_limit=6_000),
        Worker("large", "openai/gpt-4o-mini", context_limit=40_000),
    ]
    messages = _transcript(40, 900, seed)
    running = RunningCounts()
    for n in range(2, len(messages), 3):  # a growing transcript, one decision per step
        part = messages[:n]
        bounded = fit(policy, workers, part, TOOLS, running=running)
        counted = fit(policy, workers, part, TOOLS)
        assert bounded.masked == counted.masked
        for w in workers:
            threshold = policy.threshold(w)
            assert (bounded.tokens[w.name] > threshold) == (counted.tokens[w.name] > threshold)
            assert bounded.tokens[w.name] >= counted.tokens[w.name]


def test_windows_are_asked_of_litellm_once_per_model_and_table(tmp_path: Path) -> None:
    asked: list[str] = []

    class Table:
        def get_model_info(self, model: str) -> dict[str, Any]:
            asked.append(model)
            if model == "openai/unknown":
                raise ValueError("not mapped")
            return {"max_input_tokens": 272_000, "max_output_tokens": 128_000, "mode": "chat"}

    def loader() -> Any:
        return Table()

    def window(info: Mapping[str, Any]) -> tuple[Any, Any]:
        return info["max_input_tokens"], info["max_output_tokens"]

    path = tmp_path / "models.json"
    first = ModelInfo(loader, path)
    assert window(first.get("openai/gpt-5")) == (272_000, 128_000)
    assert window(first.get("openai/unknown")) == (None, None)
    assert first.get("openai/gpt-5")["max_input_tokens"] == 272_000 and len(asked) == 2

    def never() -> Any:
        raise AssertionError("litellm was imported")

    again = ModelInfo(never, path)  # another run: from the file
    assert again.get("openai/gpt-5")["max_output_tokens"] == 128_000
    assert again.get("openai/unknown")["max_input_tokens"] is None
    # a different litellm table: the file's answers are not used
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "table": "another"}))
    assert ModelInfo(loader, path).get("openai/gpt-5")["max_input_tokens"] == 272_000
    assert asked == ["openai/gpt-5", "openai/unknown", "openai/gpt-5"]
    assert table_version() == data["table"]


def test_windows_and_counts_through_the_cache_are_litellms(tmp_path: Path) -> None:
    """A second run reads windows and OpenAI-family counts without importing litellm, with its numbers."""
    workers = [
        Worker("c", "anthropic/claude-sonnet-4-5-20250929"),
        Worker("g", "openai/gpt-4o"),
        Worker("x", "openai/no-such-model"),
    ]
    direct = LiteLLMTokens(load_litellm)
    first = LiteLLMTokens(load_litellm, model_info=tmp_path / "m.json")
    for w in workers:
        first.window(w)
    first.text(None, "warm")

    def never() -> Any:
        raise AssertionError("litellm was imported")

    cached = LiteLLMTokens(never, model_info=tmp_path / "m.json")
    for w in workers:
        assert cached.window(w) == direct.window(w)
        assert cached.family(w) == direct.family(w) and cached.family(w).startswith("tiktoken:")
        for text in TEXTS:
            assert cached.text(w, text) == direct.text(w, text)
            message = Message("tool", text, tool_call_id="c1", name="read_file")
            assert cached.message(w, message) == direct.message(w, message)
    assert all(cached.text(None, t) == direct.text(None, t) for t in TEXTS)
    assert direct.window(workers[2]).source == "default"


def test_a_decoded_encoding_kept_on_disk_counts_as_tiktoken_does(tmp_path: Path) -> None:
    import tiktoken

    from fugu_cli.llm.modelinfo import _encoding_args

    assert tiktoken_counter("cl100k_base") is not None  # points tiktoken at litellm's copies
    written = _encoding_args(tiktoken, "cl100k_base", tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [f"tiktoken-cl100k_base-{tiktoken.__version__}.marshal"]
    read = _encoding_args(tiktoken, "cl100k_base", tmp_path)
    assert read == written
    mine, reference = tiktoken.Encoding(**read), tiktoken.get_encoding("cl100k_base")
    for text in TEXTS:
        assert mine.encode(text, disallowed_special=()) == reference.encode(text, disallowed_special=())
