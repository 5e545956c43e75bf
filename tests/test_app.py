"""The composition root's choices: which router a pool gets."""

from __future__ import annotations

from pathlib import Path

from fugu_cli.app import (
    RunOptions,
    assemble,
    build_session,
    default_checkpoint,
    known_workers,
    resolve,
    router_source,
)
from fugu_cli.config import Config
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.pool import pool_from_keys
from fugu_cli.router.prior import PriorRouter
from fugu_cli.types import Message, RouteState, Worker
from tests.helpers import write_pool
from tests.loopback import LoopbackServer


def test_the_shipped_router_serves_a_pool_with_two_of_its_workers() -> None:
    pool = pool_from_keys({"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-test"})
    assert known_workers(default_checkpoint(), pool) == ["claude-sonnet", "gpt-5", "gpt-5-mini"]
    router = router_source(Config(), pool).make()
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
    assert router_source(Config(), pool).make().name == "learned:router_default"


def test_the_prior_serves_pools_the_shipped_router_does_not_know() -> None:
    assert isinstance(router_source(Config(), pool_from_keys({"GEMINI_API_KEY": "k"})).make(), PriorRouter)
    local = [Worker("alpha", "openai/alpha"), Worker("beta", "openai/beta")]
    assert isinstance(router_source(Config(), local).make(), PriorRouter)
    assert isinstance(
        router_source(Config(router="prior"), pool_from_keys({"OPENAI_API_KEY": "k"})).make(), PriorRouter
    )


def test_a_cost_weight_gives_every_worker_a_price(tmp_path: Path, loopback: LoopbackServer) -> None:
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "listed", "model": "openai/gpt-4o-mini", "api_base": loopback.base_url},
            {"name": "own", "model": "openai/own", "api_base": loopback.base_url, "price_in": 9.0},
            {"name": "unknown", "model": "openai/unknown-model-x", "api_base": loopback.base_url},
        ],
    )
    opts = RunOptions(cwd=tmp_path, pool=str(pool), cost_weight=1.0)
    workers = {w.name: w for w in build_session(opts, llm=ScriptedLLM()).deps.pool}
    assert (workers["listed"].price_in, workers["listed"].price_out) == (0.15, 0.6)
    assert (workers["own"].price_in, workers["own"].price_out) == (9.0, None)
    assert workers["unknown"].price_in is None
    plain = build_session(RunOptions(cwd=tmp_path, pool=str(pool)), llm=ScriptedLLM()).deps.pool
    assert plain[0].price_in is None  # without λ nothing is looked up


def test_sessions_assembled_from_one_resolve_share_the_backbone_not_the_transcript(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {"name": "gpt-5-mini", "model": "openai/gpt-5-mini", "api_base": loopback.base_url},
            {
                "name": "claude-sonnet",
                "model": "anthropic/claude-sonnet-4-5-20250929",
                "api_base": loopback.base_url,
            },
        ],
    )
    resolved = resolve(RunOptions(cwd=tmp_path, pool=str(pool)))
    first = assemble(resolved, llm=ScriptedLLM())
    second = assemble(
        resolved, RunOptions(cwd=tmp_path, pool=str(pool), worker="claude-sonnet"), llm=ScriptedLLM()
    )
    assert first.id != second.id
    assert first.deps.router is not second.deps.router
    assert first.deps.router.backbone is second.deps.router.backbone  # type: ignore[attr-defined]
    assert (first.settings().worker, second.settings().worker) == (None, "claude-sonnet")
