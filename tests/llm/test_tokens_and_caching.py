"""Token accounting per worker, context-window errors, Anthropic cache breakpoints and cached-token prices,
through litellm's own code against the loopback provider."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.errors import ContextOverflow
from fugu_cli.llm.client import ClientConfig, LiteLLMClient, load_litellm, table_cached_price, table_price
from fugu_cli.llm.tokens import DEFAULT_WINDOW, CharTokens, LiteLLMTokens, request_tokens
from fugu_cli.types import Message, ToolCall, Worker
from tests.loopback import LoopbackServer

FAST = ClientConfig(timeout_s=5.0)
TASK = [Message("system", "You are fugu."), Message("user", "list the files")]
OPENAI_OVERFLOW = {
    "fault": 400,
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
    "9000 tokens. Please reduce the length of the messages.",
    "code": "context_length_exceeded",
}


def test_windows_come_from_the_pool_then_litellm_then_the_default() -> None:
    tokens = LiteLLMTokens(load_litellm)
    pooled = tokens.window(Worker("small", "openai/local", context_limit=8192))
    table = tokens.window(Worker("claude", "anthropic/claude-sonnet-4-5-20250929"))
    unknown = tokens.window(Worker("x", "openai/no-such-model"))
    assert (pooled.tokens, pooled.source, pooled.reserve) == (8192, "pool", 2048)
    assert (table.tokens, table.source) == (200_000, "litellm") and table.reserve == 8192
    assert (unknown.tokens, unknown.source) == (DEFAULT_WINDOW, "default")
    assert pooled.usable == 8192 - 2048


def test_counts_follow_the_workers_tokenizer_and_repeat_from_the_cache() -> None:
    tokens = LiteLLMTokens(load_litellm)
    w = Worker("a", "openai/gpt-4o")
    text = "def add(a, b):\n    return a + b\n" * 50
    message = Message("tool", text, tool_call_id="c1", name="read_file")
    import tiktoken

    expected = len(tiktoken.get_encoding(tokens.family(w).split(":", 1)[1]).encode(text))
    assert tokens.message(w, message) >= expected
    assert tokens.message(w, Message("tool", text, tool_call_id="c1", name="read_file")) == tokens.message(
        w, message
    )
    call = Message("assistant", None, (ToolCall("c1", "read_file", '{"path": "calc.py"}'),))
    assert tokens.message(w, call) > 4
    assert request_tokens(tokens, w, [message, call], []) > tokens.message(w, message)
    # a rough count for scripted runs is within a factor of two of the real one
    rough = CharTokens().message(w, message)
    assert expected / 2 < rough < expected * 2


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
def test_openai_context_window_error_is_an_overflow_and_not_retried(
    loopback: LoopbackServer, direct: bool
) -> None:
    loopback.script("test-model", [OPENAI_OVERFLOW, "never"])
    worker = Worker("w", "openai/test-model", api_base=loopback.base_url)
    with pytest.raises(ContextOverflow) as caught:
        LiteLLMClient(dataclasses.replace(FAST, direct=direct)).complete(worker, TASK, [])
    assert "context window" in str(caught.value)
    assert len(loopback.requests) == 1


def test_anthropic_prompt_too_long_is_an_overflow(loopback: LoopbackServer) -> None:
    loopback.script(
        "claude-test", [{"fault": 400, "message": "prompt is too long: 250000 tokens > 200000 maximum"}]
    )
    worker = Worker("c", "anthropic/claude-test", api_base=loopback.url)
    with pytest.raises(ContextOverflow):
        LiteLLMClient(FAST).complete(worker, TASK, [])
    assert len(loopback.requests) == 1


def test_anthropic_requests_carry_cache_breakpoints_on_the_stable_prefix(loopback: LoopbackServer) -> None:
    loopback.script("claude-test", ["ok"])
    worker = Worker("c", "anthropic/claude-test", api_base=loopback.url)
    transcript = [*TASK, Message("assistant", "Looking."), Message("user", "and the tests?")]
    LiteLLMClient(FAST).complete(worker, transcript, [])
    body = loopback.requests[0].body
    system = body["system"]
    assert isinstance(system, list) and system[-1]["cache_control"] == {"type": "ephemeral"}
    last = body["messages"][-1]["content"]
    assert isinstance(last, list) and last[-1]["cache_control"] == {"type": "ephemeral"}
    # not every message: the breakpoints sit on the system prompt and the end of the prefix
    marked = [m for m in body["messages"] if "cache_control" in str(m["content"])]
    assert len(marked) == 1


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
def test_openai_requests_carry_no_cache_marks(loopback: LoopbackServer, direct: bool) -> None:
    loopback.script("test-model", ["ok"])
    worker = Worker("w", "openai/test-model", api_base=loopback.base_url)
    LiteLLMClient(dataclasses.replace(FAST, direct=direct)).complete(worker, TASK, [])
    assert "cache_control" not in str(loopback.requests[0].body)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "litellm"])
def test_a_claude_model_on_an_openai_compatible_server_gets_no_cache_marks(
    loopback: LoopbackServer, direct: bool
) -> None:
    """A model id that merely contains "claude" on an OpenAI-compatible endpoint (a proxy, a router) is not
    Anthropic's API: no cache_control blocks, its messages as plain strings."""
    loopback.script("claude-sonnet", ["ok"])
    worker = Worker("w", "openai/claude-sonnet", api_base=loopback.base_url)
    transcript = [*TASK, Message("assistant", "Looking."), Message("user", "and the tests?")]
    LiteLLMClient(dataclasses.replace(FAST, direct=direct)).complete(worker, transcript, [])
    body = loopback.requests[0].body
    assert "cache_control" not in str(body)
    assert all(isinstance(m["content"], str) for m in body["messages"])


def test_cached_input_tokens_cost_the_cached_price(loopback: LoopbackServer) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 800}
    loopback.script("test-model", [{"content": "ok", "usage": usage}] * 2)
    priced = Worker(
        "w", "openai/test-model", api_base=loopback.base_url, price_in=10.0, price_out=20.0, price_cached=1.0
    )
    done = LiteLLMClient(FAST).complete(priced, TASK, [])
    assert done.usage.cached_tokens == 800
    assert done.usage.cost_usd == pytest.approx((200 * 10.0 + 800 * 1.0 + 100 * 20.0) / 1e6)
    # without a cached price of its own, a model unknown to litellm gets no discount it cannot prove
    plain = Worker("w", "openai/test-model", api_base=loopback.base_url, price_in=10.0, price_out=20.0)
    again = LiteLLMClient(FAST).complete(plain, TASK, [])
    assert again.usage.cost_usd == pytest.approx((1000 * 10.0 + 100 * 20.0) / 1e6)


def test_table_priced_cached_tokens_use_litellms_cached_price() -> None:
    from fugu_cli.llm.pricing import PriceBook
    from fugu_cli.types import Usage

    book = PriceBook(load_litellm)
    claude = Worker("c", "anthropic/claude-sonnet-4-5-20250929")
    full, _ = book.cost(claude, Usage(prompt_tokens=1_000_000))
    cached, _ = book.cost(claude, Usage(prompt_tokens=1_000_000, cached_tokens=1_000_000))
    assert full.cost_usd == pytest.approx(3.0) and cached.cost_usd == pytest.approx(0.3)
    own_in = Worker("c", "anthropic/claude-sonnet-4-5-20250929", price_in=3.0, price_out=15.0)
    mine, _ = book.cost(own_in, Usage(prompt_tokens=1_000_000, cached_tokens=1_000_000))
    assert mine.cost_usd == pytest.approx(0.3)


def test_a_reply_without_token_counts_is_said_once_per_worker(loopback: LoopbackServer) -> None:
    """A server that sends no usage leaves tokens and cost at 0: the user hears it once, not silently."""
    from fugu_cli.llm.pricing import PriceBook
    from fugu_cli.types import Usage

    book = PriceBook(load_litellm)
    priced = Worker("no-usage-a", "openai/x", price_in=1.0, price_out=2.0)
    _, first = book.cost(priced, Usage())
    _, second = book.cost(priced, Usage())
    assert first is not None and "no-usage-a reported no token counts" in first and second is None
    free = Worker("no-usage-b", "openai/x", price_in=0.0, price_out=0.0)
    assert book.cost(free, Usage())[1] is None
    assert book.cost(Worker("no-usage-c", "openai/x", price_in=1.0), Usage(prompt_tokens=5))[1] is None
    # end to end: the loopback answers with zero counts, the completion carries the warning for the notice
    zero = Worker("no-usage-d", "openai/test-model", api_base=loopback.base_url, price_in=1.0, price_out=2.0)
    loopback.script("test-model", [{"content": "hi", "usage": {"prompt_tokens": 0, "completion_tokens": 0}}])
    done = LiteLLMClient(FAST).complete(zero, TASK, [])
    assert done.usage.cost_usd == 0 and any("no-usage-d reported no token counts" in w for w in done.warnings)


def test_a_model_litellm_cannot_price_is_known_as_such_next_run_without_litellm(tmp_path: Path) -> None:
    """A local worker under a name of its own and no prices: the first run learns from litellm's table that
    it has no price (the warning, $0); the next run knows it from the kept answers and never imports
    litellm. A model the table prices by the token is priced as litellm prices it, also without litellm
    (up to the prompt size its price tier starts at: past it, litellm is asked); a run that has not met a
    model asks litellm."""
    from fugu_cli.llm.modelinfo import ModelInfo
    from fugu_cli.llm.pricing import PriceBook, unknown_price_warning
    from fugu_cli.types import Usage

    kept = tmp_path / "models.json"
    local = Worker("local-a", "openai/my-own-local-model")
    claude = Worker("c", "anthropic/claude-sonnet-4-5-20250929")
    first = PriceBook(load_litellm, ModelInfo(load_litellm, kept))
    assert first.needs_table(local)  # nothing kept yet: litellm's table is asked
    cost, warning = first.cost(local, Usage(prompt_tokens=100, completion_tokens=10))
    assert cost.cost_usd == 0 and warning == unknown_price_warning(local)
    priced, none = first.cost(claude, Usage(prompt_tokens=1_000_000))
    assert priced.cost_usd == pytest.approx(3.0) and none is None

    def never() -> Any:
        raise AssertionError("litellm was imported")

    gemini = Worker("g", "gemini/gemini-2.5-pro")  # a higher price past 200k prompt tokens
    asked = {u: first.cost(gemini, u)[0].cost_usd for u in (Usage(200_000, 10, 50_000), Usage(200_001, 10))}
    assert asked[Usage(200_001, 10)] > asked[Usage(200_000, 10, 50_000)] * 1.2

    again = PriceBook(never, ModelInfo(never, kept))
    assert not again.needs_table(local) and not again.needs_table(claude) and not again.needs_table(gemini)
    cost, _ = again.cost(local, Usage(prompt_tokens=100, completion_tokens=10))
    assert cost.cost_usd == 0
    assert again.cost(claude, Usage(prompt_tokens=1_000_000))[0].cost_usd == pytest.approx(3.0)
    assert again.cost(claude, Usage(1_000_000, 0, 1_000_000))[0].cost_usd == pytest.approx(0.3)
    local_gemini = again.cost(gemini, Usage(200_000, 10, 50_000))[0].cost_usd
    assert local_gemini == pytest.approx(asked[Usage(200_000, 10, 50_000)], rel=1e-12)
    asks: list[str] = []

    def counted() -> Any:
        asks.append("litellm")
        return load_litellm()

    tiered = PriceBook(counted, ModelInfo(never, kept))
    assert tiered.cost(gemini, Usage(150_000, 10))[0].cost_usd > 0 and asks == []
    assert tiered.cost(gemini, Usage(200_001, 10))[0].cost_usd == asked[Usage(200_001, 10)]
    assert asks == ["litellm"]  # past the tier: litellm prices it
    with pytest.raises(AssertionError, match="litellm was imported"):
        again.cost(Worker("n", "openai/never-met"), Usage(prompt_tokens=1))
    # the pool's prices (`fugu pool`, the router's cost term) from the kept answers are litellm's own
    kept_info = ModelInfo(never, kept)
    assert table_price(claude.model, kept_info) == table_price(claude.model) == (3.0, 15.0)
    # a tiered model's price is its first tier's, what most calls pay (asked for a million tokens, litellm
    # answers with the price past 200k: 2.50 and 15.00)
    assert table_price(gemini.model, kept_info) == table_price(gemini.model) == (1.25, 10.0)
    assert (
        table_cached_price(claude.model, kept_info) == table_cached_price(claude.model) == pytest.approx(0.3)
    )
    assert table_price(local.model, kept_info) is None and table_cached_price(local.model, kept_info) is None
    # a worker with its own input price and no cached price: litellm's discount ratio, from the kept answers
    own = Worker("c", claude.model, price_in=3.0, price_out=15.0)
    mine, _ = again.cost(own, Usage(prompt_tokens=1_000_000, cached_tokens=1_000_000))
    assert mine.cost_usd == pytest.approx(0.3)
    # prices filled in from the table for the router's cost term: the router sees the first tier's price,
    # a reply is priced as the table prices it, past the tier too
    from fugu_cli.pool import with_table_prices

    [given] = with_table_prices([gemini], kept_info)
    assert (given.price_in, given.price_out, given.table_prices) == (1.25, 10.0, True)
    assert not tiered.needs_table(given)
    # serve imports litellm up front for a model with a tier (a long prompt's reply needs it), not for others
    assert tiered.may_need_table(given) and tiered.may_need_table(gemini)
    assert not tiered.may_need_table(claude) and not tiered.may_need_table(local)
    assert tiered.cost(given, Usage(150_000, 10))[0].cost_usd == pytest.approx(
        (150_000 * 1.25 + 10 * 10) / 1e6
    )
    assert tiered.cost(given, Usage(200_001, 10))[0].cost_usd == asked[Usage(200_001, 10)]


def test_prices_without_litellm_are_litellms_own() -> None:
    """`unit_price` (kept per model, so that a reply is priced without importing litellm) against litellm's
    `cost_per_token` on random usages, with cached tokens, for models priced flat, with a cached price, and
    with a tier past 200k prompt tokens; a price that depends on the time of day is left to litellm."""
    import random

    from fugu_cli.llm.modelinfo import local_cost, unit_price

    litellm = load_litellm()
    rng = random.Random(7)
    models = [
        "openai/gpt-5",
        "openai/gpt-4o",
        "anthropic/claude-sonnet-4-5-20250929",
        "gemini/gemini-2.5-pro",
    ]
    units = {m: unit_price(litellm, m, litellm.get_model_info(m)) for m in models}
    assert units["gemini/gemini-2.5-pro"] is not None and units["gemini/gemini-2.5-pro"][3] == 200_000
    for model, unit in units.items():
        assert unit is not None, model
        for _ in range(100):
            prompt = rng.randint(0, int(unit[3] or 2_000_000))
            completion, cached = rng.randint(0, 64_000), rng.randint(0, prompt)
            theirs = sum(
                litellm.cost_per_token(
                    model=model,
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    cache_read_input_tokens=cached,
                )
            )
            assert local_cost(unit, prompt, completion, cached) == pytest.approx(theirs, rel=1e-9, abs=1e-12)
    info = dict(litellm.get_model_info("openai/gpt-5"))
    assert unit_price(litellm, "openai/gpt-5", info | {"off_peak_pricing": {"start": "16:30"}}) is None
    assert local_cost(None, 10, 10, 0) is None
