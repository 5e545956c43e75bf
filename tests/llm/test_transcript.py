"""Transcript hygiene: what a provider receives when workers of different providers share a transcript."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest

from fugu_cli.llm.transcript import MISSING_RESULT, WireTranscript, clean_transcript
from fugu_cli.types import Message, ToolCall


def test_reasoning_fields_are_dropped_and_tool_pairs_kept() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call],
            "reasoning_content": "secret chain",
            "thinking_blocks": [{"type": "thinking", "thinking": "x", "signature": "s"}],
            "provider_specific_fields": {"a": 1},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "out", "name": "shell"},
    ]
    out = clean_transcript(messages)
    assert out == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "out", "name": "shell"},
    ]


def test_unanswered_call_gets_a_result_and_orphan_result_is_kept_as_text() -> None:
    messages = [
        Message("user", "go"),
        Message("assistant", None, (ToolCall("c1", "shell", "{}"), ToolCall("c2", "read", "{}")), worker="a"),
        Message("tool", "first", tool_call_id="c1", name="shell"),
        Message("user", "actually stop"),
        Message("tool", "late output", tool_call_id="zz", name="shell"),
        Message("assistant", None),
    ]
    out = clean_transcript([m.to_openai() for m in messages])
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user", "user", "assistant"]
    assert out[3] == {"role": "tool", "tool_call_id": "c2", "content": MISSING_RESULT}
    assert "late output" in out[5]["content"]
    assert out[6]["content"] == ""


def _message(rng: random.Random, i: int, open_ids: list[str]) -> Message:
    kind = rng.choice(["user", "assistant", "calls", "tool", "orphan", "system"])
    if kind == "calls":
        calls = tuple(ToolCall(f"c{i}_{k}", "shell", f'{{"n": {k}}}') for k in range(rng.randint(1, 3)))
        open_ids[:] = [c.id for c in calls]
        return Message("assistant", rng.choice([None, "working"]), calls, worker=rng.choice("ab"))
    if kind == "tool" and open_ids:
        return Message("tool", f"out {i}", tool_call_id=open_ids.pop(0), name="shell")
    if kind == "orphan":
        return Message("tool", f"late {i}", tool_call_id=f"gone{i}", name="shell")
    if kind in ("user", "system"):
        return Message("user" if kind == "user" else "system", rng.choice([f"say {i}", None]))
    return Message("assistant", f"answer {i}")


@pytest.mark.parametrize("seed", range(8))
def test_the_incremental_wire_list_is_the_cleaned_transcript_whatever_happens(seed: int) -> None:
    """Growing, compacted (the tail replaced), a brief moved to another turn, the first message changed: each
    request equals cleaning the whole transcript, and no list handed out earlier changes afterwards."""
    rng = random.Random(seed)
    wire = WireTranscript()
    transcript: list[Message] = [Message("system", "You are fugu.")]
    open_ids: list[str] = []
    handed: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
    for i in range(120):
        event = rng.random()
        if event < 0.7:
            transcript.append(_message(rng, i, open_ids))
        elif event < 0.8 and len(transcript) > 3:  # a compaction: the middle replaced by a summary
            cut = rng.randrange(1, len(transcript) - 1)
            transcript[cut:] = [Message("user", f"summary {i}"), *transcript[-rng.randint(1, 2) :]]
        elif event < 0.9 and len(transcript) > 2:  # a brief inserted before some message
            at = rng.randrange(1, len(transcript))
            transcript = [*transcript[:at], Message("system", f"brief {i}"), *transcript[at:]]
        else:  # the system message rewritten (a role's note)
            transcript[0] = Message("system", f"You are fugu. Role {i}.")
        got = wire.build(transcript)
        want = clean_transcript([m.to_openai() for m in transcript])
        assert got == want
        handed.append((got, copy.deepcopy(got)))
    assert all(a == b for a, b in handed)


def test_a_growing_transcript_converts_only_its_new_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    converted: list[Message] = []
    original = Message.to_openai

    def counting(self: Message) -> dict[str, Any]:
        converted.append(self)
        return original(self)

    monkeypatch.setattr(Message, "to_openai", counting)
    wire = WireTranscript()
    transcript = [Message("system", "sys"), Message("user", "go")]
    wire.build(transcript)
    for i in range(50):
        call = ToolCall(f"c{i}", "shell", "{}")
        transcript += [Message("assistant", None, (call,)), Message("tool", f"out {i}", tool_call_id=f"c{i}")]
        before = len(converted)
        out = wire.build(transcript)
        assert converted[before:] == transcript[-2:]
        assert len(out) == len(transcript)
