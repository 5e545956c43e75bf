"""What the pass-through reads of a request's messages: how it recognises a conversation it has seen (each
message's digest chains onto the one before, alike whatever a client's serializer does, and different
wherever what was said differs), and the transcript its router reads."""

from __future__ import annotations

from typing import Any

from fugu_cli.router.prior import PriorRouter
from fugu_cli.serve.conversation import Conversations, chain
from fugu_cli.serve.passthrough import Transcript
from fugu_cli.types import Message, RouteState, ToolCall, Worker


def _call(call_id: str, arguments: Any, name: str = "read_file") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_the_same_conversation_serialized_differently_has_the_same_digests() -> None:
    one: list[dict[str, Any]] = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", '{"path": "a.py"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    ]
    other: list[dict[str, Any]] = [
        {"content": "rules", "role": "developer"},
        {"content": [{"type": "text", "text": "fix it"}], "role": "user"},
        {"tool_calls": [_call("c1", '{"path": "a.py"}')], "content": "", "role": "assistant"},
        {"content": "print(1)", "role": "function", "tool_call_id": "c1"},
    ]
    assert chain(one) == chain(other)
    assert chain(one[:2]) == chain(one)[:2]  # digests[i] is the prefix's: a longer request extends it
    assert chain(one[2:], chain(one)[1]) == chain(one)[2:]


def test_what_was_said_differently_has_other_digests() -> None:
    base: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("c1", '{"path": "a.py"}')],
    }
    variants: list[dict[str, Any]] = [
        base,
        base | {"tool_calls": [_call("c2", '{"path": "a.py"}')]},
        base | {"tool_calls": [_call("c1", '{"path": "b.py"}')]},
        base | {"tool_calls": [_call("c1", '{"path": "a.py"}', name="write_file")]},
        base | {"tool_calls": [_call("c1", {"path": "a.py"})]},  # arguments as an object, not a string
        base | {"tool_calls": []},
        base | {"tool_calls": [_call("c1", '{"path": "a.py"}')] * 2},
        base | {"content": "a.py"},
        base | {"role": "user"},
        {"role": "tool", "tool_call_id": "c1", "content": ""},
        {"role": "tool", "tool_call_id": "", "content": ""},
        {"role": "tool", "content": ""},
    ]
    digests = [chain([m])[0] for m in variants]
    assert len(set(digests)) == len(variants)
    # the boundary between two fields is part of what is hashed: moving text across it is a change
    assert chain([{"role": "user", "content": "ab"}]) != chain([{"role": "useraa", "content": "b"}])


def test_odd_text_is_hashed_not_refused() -> None:
    lone_surrogate = {"role": "user", "content": "half a pair: \ud800"}  # valid JSON ("\\ud800")
    [digest] = chain([lone_surrogate])
    assert len(digest) == 16 and chain([lone_surrogate]) == [digest]
    odd_content = {"role": "user", "content": {"not": "a list of parts"}}
    assert chain([odd_content]) != chain([{"role": "user", "content": ""}])


def test_the_longest_known_prefix_is_found_and_the_oldest_forgotten_first() -> None:
    talk = [{"role": "user", "content": f"message {i}"} for i in range(5)]
    digests = chain(talk)
    known = Conversations(limit=2)
    known.remember(digests[1], "s-short")
    known.remember(digests[3], "s-long")
    assert known.find(digests) == ("s-long", 4)
    assert known.find(digests[:3]) == ("s-short", 2)
    known.remember(chain([{"role": "user", "content": "another"}])[0], "s-other")
    assert len(known) == 2  # s-long, found before s-short, was the least recently used
    assert known.find(digests) == ("s-short", 2)


def test_the_routers_transcript_makes_each_message_when_read_and_the_prior_reads_only_to_the_task() -> None:
    raw: list[dict[str, Any]] = [
        {"role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "fix the parser"}]},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", {"path": "a.py"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
    ]
    raw += [{"role": "user", "content": f"and then {i}"} for i in range(50)]
    lazy = Transcript(raw)
    state = RouteState(messages=lazy, step=1)
    pool = [Worker(name="parser-expert", model="openai/m", description="fixes the parser")]
    assert PriorRouter().pick(state, pool).worker == "parser-expert" and state.task == "fix the parser"
    assert sum(m is not None for m in lazy._made) == 2  # the system message and the task, no more
    call = ToolCall("c1", "read_file", '{"path": "a.py"}')
    assert lazy[2:4] == [
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content="print(1)", tool_call_id="c1"),
    ]
    assert lazy[-1] == Message(role="user", content="and then 49") and lazy[0].role == "system"
    assert len(lazy) == 54 and len(list(lazy)) == 54 and lazy[2] is lazy[2]  # each made once
