"""ScriptedLLM: per-worker and shared queues, faults, files, recording; what the session and demo rely on."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fugu_cli.errors import ConfigError, Interrupted, ProviderError
from fugu_cli.llm.scripted import EXHAUSTED, ScriptedLLM
from fugu_cli.types import Message, Worker

A = Worker("alpha", "openai/a", price_in=1.0, price_out=2.0)
B = Worker("beta", "anthropic/b")
TASK = [Message("user", "fix the bug")]


def test_per_worker_queue_then_shared_then_exhausted() -> None:
    llm = ScriptedLLM({"alpha": [{"content": "a1"}], "*": [{"content": "shared"}]})
    assert llm.complete(A, TASK, []).message.content == "a1"
    assert llm.complete(A, TASK, []).message.content == "shared"
    done = llm.complete(B, TASK, [])
    assert done.message.content == EXHAUSTED and done.message.tool_calls == ()
    assert llm.workers_called() == ["alpha", "alpha", "beta"]
    assert llm.calls[0].messages == tuple(TASK)


def test_tool_calls_get_unique_ids_and_raw_arguments() -> None:
    calls = [{"name": "shell", "arguments": {"cmd": "ls"}}, {"name": "write", "arguments": '{"path": '}]
    llm = ScriptedLLM([{"tool_calls": calls}, {"tool_calls": calls[:1]}])
    first = llm.complete(A, TASK, []).message
    second = llm.complete(B, TASK, []).message
    assert json.loads(first.tool_calls[0].arguments) == {"cmd": "ls"}
    assert first.tool_calls[1].arguments == '{"path": '
    ids = [c.id for c in first.tool_calls + second.tool_calls]
    assert len(set(ids)) == 3
    assert first.worker == "alpha" and second.worker == "beta"


def test_usage_and_cost() -> None:
    llm = ScriptedLLM(
        [
            {"content": "x", "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}},
            {"content": "y", "cost_usd": 0.25},
        ]
    )
    assert llm.complete(A, TASK, []).usage.cost_usd == pytest.approx(0.003)
    assert llm.complete(B, TASK, []).usage.cost_usd == 0.25


def test_error_entry_raises_provider_error() -> None:
    """An error is the worker giving up; marked retryable it is one failed attempt the service retries."""
    llm = ScriptedLLM([{"error": "429", "retryable": True}, {"error": "401"}, {"content": "after"}])
    with pytest.raises(ProviderError) as first:
        llm.complete(A, TASK, [])
    assert first.value.retryable and first.value.worker == "alpha" and "429" in str(first.value)
    with pytest.raises(ProviderError) as second:
        llm.complete(A, TASK, [])
    assert not second.value.retryable
    assert llm.complete(A, TASK, []).message.content == "after"


def test_streams_text_and_honours_cancel() -> None:
    llm = ScriptedLLM(["one two three", {"content": "slow", "delay_s": 5}])
    pieces: list[str] = []
    llm.complete(A, TASK, [], on_text=pieces.append)
    assert len(pieces) == 3 and "".join(pieces) == "one two three"
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(Interrupted):
        llm.complete(A, TASK, [], cancel=cancel)


def test_from_file(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({"replies": {"beta": ["from beta"], "*": [{"content": "anyone"}]}}))
    llm = ScriptedLLM.from_file(path)
    assert llm.complete(B, TASK, []).message.content == "from beta"
    assert llm.complete(A, TASK, []).message.content == "anyone"
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ConfigError, match=r"bad\.json"):
        ScriptedLLM.from_file(tmp_path / "bad.json")
