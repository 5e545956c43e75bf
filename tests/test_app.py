"""The composition root's choices: which router a pool gets."""

from __future__ import annotations

from fugu_cli.app import build_router, default_checkpoint, known_workers
from fugu_cli.config import Config
from fugu_cli.pool import pool_from_keys
from fugu_cli.router.prior import PriorRouter
from fugu_cli.types import Message, RouteState, Worker


def test_the_shipped_router_serves_a_pool_with_two_of_its_workers() -> None:
    pool = pool_from_keys({"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-test"})
    assert known_workers(default_checkpoint(), pool) == ["claude-sonnet", "gpt-5", "gpt-5-mini"]
    router = build_router(Config(), pool)
    assert router.name == "learned:router_default"
    state = RouteState([Message("user", "Fix the failing Django migration test")], step=1)
    decision = router.pick(state, pool)
    assert decision.source == "learned" and set(decision.scores) == {w.name for w in pool}
    assert abs(sum(decision.scores.values()) - 1.0) < 1e-5


def test_a_worker_is_known_by_its_model_under_another_name() -> None:
    pool = [
        Worker("mine", "openai/gpt-5-mini"),
        Worker("other", "anthropic/claude-sonnet-4-5-20250929"),
    ]
    assert known_workers(default_checkpoint(), pool) == ["mine", "other"]
    assert build_router(Config(), pool).name == "learned:router_default"


def test_the_prior_serves_pools_the_shipped_router_does_not_know() -> None:
    assert isinstance(build_router(Config(), pool_from_keys({"GEMINI_API_KEY": "k"})), PriorRouter)
    local = [Worker("alpha", "openai/alpha"), Worker("beta", "openai/beta")]
    assert isinstance(build_router(Config(), local), PriorRouter)
    assert isinstance(
        build_router(Config(router="prior"), pool_from_keys({"OPENAI_API_KEY": "k"})), PriorRouter
    )
