"""The learned router in a process of its own (one-shot runs): the same decisions as in-process, step after
step with only new messages crossing the pipe; every-worker-excluded is a LookupError as in-process; a child
that cannot load or dies makes a RouterFailed (the session then falls back to the prior)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from fugu_cli.app import default_checkpoint
from fugu_cli.router.learned import LearnedRouter
from fugu_cli.router.remote import RouterFailed, RouterProcess
from fugu_cli.types import Message, RouteState, ToolCall, Worker

POOL = [
    Worker("claude-sonnet", "anthropic/claude-sonnet-4-5-20250929", price_in=3.0, price_out=15.0),
    Worker("gpt-5", "openai/gpt-5", price_in=1.25, price_out=10.0),
    Worker("gpt-5-mini", "openai/gpt-5-mini", price_in=0.25, price_out=2.0),
]


def _steps(n: int) -> list[Message]:
    out = [Message("system", "You are fugu."), Message("user", "fix the failing test in calc.py")]
    for i in range(n):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
        out.append(Message("assistant", f"reading module {i}", (call,), worker="gpt-5"))
        out.append(Message("tool", f"def f{i}(x):\n    return x * {i}\n" * 5, tool_call_id=f"c{i}"))
    return out


def test_decisions_across_the_pipe_are_the_in_process_ones() -> None:
    remote = RouterProcess(default_checkpoint(), None)
    local = LearnedRouter.load(default_checkpoint())
    try:
        assert remote.name == local.name and remote.has_roles == local.has_roles
        transcript = _steps(6)
        messages: list[Message] = []
        for step, m in enumerate(transcript, 1):  # the transcript grows by one message per decision
            messages.append(m)
            state = RouteState(messages=tuple(messages), step=step, last_worker="gpt-5")
            got, want = remote.pick(state, POOL), local.pick(state, POOL)
            assert (got.worker, got.source, got.reason) == (want.worker, want.source, want.reason)
            assert got.scores == pytest.approx(want.scores, abs=1e-6)
        # a compacted transcript (not a continuation of the last one) and a smaller pool
        state = RouteState(
            messages=(transcript[0], Message("user", "summary: tests fixed"), *transcript[-2:]),
            step=9,
            excluded=frozenset({"gpt-5"}),
            failover=True,
            masked={"gpt-5-mini": "too small"},
        )
        got, want = remote.pick(state, POOL[:2]), local.pick(state, POOL[:2])
        assert got.worker == want.worker == "claude-sonnet" and got.scores == pytest.approx(want.scores)
        everyone = RouteState(messages=tuple(messages), step=10, excluded=frozenset(w.name for w in POOL))
        with pytest.raises(LookupError, match="excluded"):
            remote.pick(everyone, POOL)
        assert remote.pick(RouteState(messages=tuple(messages), step=11), POOL).worker
    finally:
        remote.close()
    assert remote._proc.returncode == 0  # it ended when the pipe closed


def test_a_checkpoint_that_cannot_load_and_a_dead_child_are_router_failures(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(default_checkpoint(), broken)
    (broken / "router.safetensors").write_bytes(b"not a tensor file")
    state = RouteState(messages=tuple(_steps(1)), step=1)
    remote = RouterProcess(broken, None)
    try:
        with pytest.raises(RouterFailed, match="cannot load router checkpoint"):
            remote.pick(state, POOL)
    finally:
        remote.close()
    alive = RouterProcess(default_checkpoint(), None)
    try:
        assert alive.pick(state, POOL).worker
        alive._proc.kill()
        alive._proc.wait()
        with pytest.raises(RouterFailed, match="stopped"):
            alive.pick(state, POOL)
    finally:
        alive.close()


def test_what_the_router_process_says_on_stderr_goes_to_the_log(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(default_checkpoint(), broken)
    (broken / "router.safetensors").write_bytes(b"not a tensor file")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("fugu")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # as `logs.setup` leaves it
    remote = RouterProcess(broken, None)
    try:
        with pytest.raises(RouterFailed):
            remote.pick(RouteState(messages=tuple(_steps(1)), step=1), POOL)
    finally:
        remote.close()
        logger.removeHandler(handler)
        logger.setLevel(level)
    said = [line for line in seen if line.startswith("router process: ")]
    assert said and said[0] == "router process: Traceback (most recent call last):"
    assert any("router.safetensors" in line or "Error" in line for line in said[1:])
