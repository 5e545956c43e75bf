"""Transcript hygiene before a call: the shared transcript mixes workers and providers (DESIGN section 3).

Keeps only fields every OpenAI-compatible provider accepts, keeps tool-call ids and results paired, and never
drops a tool result (an orphan becomes a user message). Pure functions on OpenAI-shaped dicts.
"""

from __future__ import annotations

from typing import Any

ALLOWED_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}
MISSING_RESULT = "(no result: the call was interrupted before it finished)"


def clean_transcript(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drops reasoning/thinking fields, pairs every tool call with a result, keeps orphan results as text."""
    out: list[dict[str, Any]] = []
    open_calls: list[str] = []
    for raw in messages:
        msg = {k: v for k, v in raw.items() if k in ALLOWED_KEYS}
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
                out.append(msg)
            else:
                out.append(_orphan_as_user(msg))
            continue
        _close(out, open_calls)
        if role == "assistant":
            msg = _clean_assistant(msg)
            open_calls = [tc["id"] for tc in msg.get("tool_calls", ())]
        elif msg.get("content") is None:
            msg["content"] = ""
        out.append(msg)
    _close(out, open_calls)
    return out


def _clean_assistant(msg: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {"id": tc["id"], "type": "function", "function": dict(tc["function"])}
        for tc in msg.get("tool_calls") or ()
    ]
    if calls:
        msg["tool_calls"] = calls
    else:
        msg.pop("tool_calls", None)
        if msg.get("content") is None:
            msg["content"] = ""
    msg.pop("tool_call_id", None)
    return msg


def _close(out: list[dict[str, Any]], open_calls: list[str]) -> None:
    """Providers reject an assistant tool call with no following result, so unanswered calls get one."""
    for call_id in open_calls:
        out.append({"role": "tool", "tool_call_id": call_id, "content": MISSING_RESULT})
    open_calls.clear()


def _orphan_as_user(msg: dict[str, Any]) -> dict[str, Any]:
    label = msg.get("name") or msg.get("tool_call_id") or "tool"
    return {"role": "user", "content": f"[result of {label}]\n{msg.get('content') or ''}"}


CACHE_MARK = {"type": "ephemeral"}


def mark_cache_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic caches the prompt prefix up to each `cache_control` mark (four at most): mark the system
    prompt (stable for the whole session) and the last message (so the next step reads all of this one's
    prompt from the cache). Text content becomes a one-block list, which litellm passes through."""
    out = [dict(m) for m in messages]
    marks = [i for i, m in enumerate(out) if m.get("role") == "system"][:1]
    if out and len(out) - 1 not in marks:
        marks.append(len(out) - 1)
    for i in marks:
        content = out[i].get("content")
        if isinstance(content, str) and content:
            out[i]["content"] = [{"type": "text", "text": content, "cache_control": dict(CACHE_MARK)}]
    return out
