"""Transcript hygiene: what a provider receives when workers of different providers share a transcript."""

from __future__ import annotations

from typing import Any

from fugu_cli.llm.transcript import MISSING_RESULT, clean_transcript
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
