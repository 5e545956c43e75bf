"""A session as a document a person can read or attach to a pull request: every turn, every step's routing
decision (worker, probability, latency, reason), tool call, diff and cost, in JSON, Markdown or HTML.

Reads the store; every text is redacted again with this process's secrets (a key set since the session ran
is blanked too). `read_markdown` reads the steps back from the Markdown, so the two forms say the same.
Never prints: `fugu sessions export` and `/export` write what this returns.
"""

from __future__ import annotations

import difflib
import html
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from fugu_cli.redact import redact
from fugu_cli.store import Store, ToolCallRow
from fugu_cli.ui.phrases import record_text, tool_summary

FORMATS = ("md", "json", "html")
VERSION = 1


def session_document(store: Store, sid: str) -> dict[str, Any]:
    """The session as one JSON-able object (KeyError when there is no such session)."""
    from fugu_cli.ledger import Ledger

    row = store.get_session(sid)
    if row is None:
        raise KeyError(sid)
    steps: dict[int, list[dict[str, Any]]] = {}
    for ledger in Ledger(store, row.id).all_scopes():
        calls = ledger.tool_calls()
        for s in ledger.steps():
            mine = [c for c in calls if (c.turn, c.step, c.agent) == (s.turn, s.step, s.worker)]
            steps.setdefault(s.turn, []).append(
                {
                    "scope": ledger.scope,
                    "step": s.step,
                    "worker": s.worker,
                    "source": s.source,
                    "role": s.role,
                    "status": s.status,
                    "probability": s.scores.get(s.worker),
                    "scores": s.scores,
                    "latency_ms": s.latency_ms,
                    "reason": s.reason,
                    "usage": {
                        "prompt_tokens": s.usage.prompt_tokens,
                        "completion_tokens": s.usage.completion_tokens,
                        "cached_tokens": s.usage.cached_tokens,
                        "cost_usd": s.usage.cost_usd,
                    },
                    "text": s.text,
                    "tools": [_tool(c) for c in mine],
                }
            )
    attempts: dict[int, list[dict[str, Any]]] = {}
    for turn, attempt in store.attempts(row.id):
        attempts.setdefault(turn, []).append(attempt.to_json() | {"summary": record_text(attempt)})
    turns = [
        {
            "turn": t.turn,
            "task": t.task,
            "status": t.status,
            "result": t.result,
            "cost_usd": t.cost_usd,
            "steps": steps.pop(t.turn, []),
            "attempts": attempts.pop(t.turn, []),
        }
        for t in store.turns(row.id)
    ]
    turns += [
        {"turn": n, "task": "", "status": "", "result": "", "cost_usd": 0.0, "steps": s}
        | {"attempts": attempts.pop(n, [])}
        for n, s in steps.items()
    ]
    doc = {
        "fugu_export": VERSION,
        "session": {
            "id": row.id,
            "cwd": row.cwd,
            "title": row.title,
            "mode": row.mode,
            "router": row.router,
            "created_at": _when(row.created_at),
            "updated_at": _when(row.updated_at),
            "cost_usd": row.cost_usd,
        },
        "turns": turns,
        "totals": _totals(turns),
    }
    clean: dict[str, Any] = _redacted(doc)
    return clean


def render(doc: Mapping[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    if fmt == "md":
        return to_markdown(doc)
    if fmt == "html":
        return to_html(doc)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def steps_of(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every step of a document, flat, with its turn: what `read_markdown` gives back."""
    return [
        {
            "turn": t["turn"],
            "scope": s["scope"],
            "step": s["step"],
            "worker": s["worker"],
            "source": s["source"],
            "status": s["status"],
            "cost_usd": round(s["usage"]["cost_usd"], 6),
            "prompt_tokens": s["usage"]["prompt_tokens"],
            "completion_tokens": s["usage"]["completion_tokens"],
            "tools": [c["tool"] for c in s["tools"]],
        }
        for t in doc["turns"]
        for s in t["steps"]
    ]


# --- Markdown ----------------------------------------------------------------------------------------------

_STEP = re.compile(r"^### Step (\d+) · (\S+) · \$([0-9.]+)(?: · \[(\S+)\])?$")
_ROUTE = re.compile(r"^- route: (\S+)")
_TOKENS = re.compile(r"^- tokens: (\d+) in \((\d+) cached\), (\d+) out · (\S+)$")
_TOOL = re.compile(r"^- tool `([^`]+)`")
_TURN = re.compile(r"^## Turn (\d+)\b")


def to_markdown(doc: Mapping[str, Any]) -> str:
    s = doc["session"]
    totals = doc["totals"]
    out = [
        f"# fugu session {s['id']}",
        "",
        f"- folder: `{s['cwd']}` · mode: {s['mode']} · router: {s['router']}",
        f"- {totals['steps']} steps · ${totals['cost_usd']:.6f} · {s['created_at']} to {s['updated_at']}",
        "",
    ]
    for t in doc["turns"]:
        out += [f"## Turn {t['turn']} · {t['status'] or 'unknown'} · ${t['cost_usd']:.6f}", ""]
        out += [_quote(t["task"]), ""] if t["task"] else []
        for step in t["steps"]:
            out += _markdown_step(step)
        if t["attempts"]:
            out += ["**Attempts:**", ""]
            out += [f"{n}. {a['summary']}" for n, a in enumerate(t["attempts"], 1)] + [""]
        if t["result"]:
            out += ["**Answer:**", "", _quote(t["result"]), ""]
    out += ["## Who did what", "", "| worker | steps | cost |", "|---|---:|---:|"]
    for name, w in totals["workers"].items():
        out.append(f"| {name} | {w['steps']} | ${w['cost_usd']:.6f} |")
    return "\n".join(out) + "\n"


def _markdown_step(step: Mapping[str, Any]) -> list[str]:
    u = step["usage"]
    scope = f" · [{step['scope']}]" if step["scope"] != "main" else ""
    p = step["probability"]
    why = ", ".join(
        [*([f"p={p:.2f}"] if p is not None else []), f"{step['latency_ms']:.0f} ms"]
        + ([step["role"]] if step["role"] else [])
    )
    lines = [
        f"### Step {step['step']} · {step['worker']} · ${u['cost_usd']:.6f}{scope}",
        "",
        f"- route: {step['source']} ({why})" + (f" · {step['reason']}" if step["reason"] else ""),
        f"- tokens: {u['prompt_tokens']} in ({u['cached_tokens']} cached), {u['completion_tokens']} out · "
        f"{step['status']}",
    ]
    for call in step["tools"]:
        flag = " · denied" if call["denied"] else " · error" if call["is_error"] else ""
        lines.append(f"- tool `{call['tool']}`: {call['summary']}{flag}")
        if call["diff"]:
            lines += ["", "```diff", call["diff"].rstrip(), "```"]
    if step["text"].strip():
        lines += ["", _quote(step["text"])]  # quoted: a worker's text never reads as a heading
    return [*lines, ""]


def read_markdown(text: str) -> list[dict[str, Any]]:
    """The steps of an exported Markdown document, as `steps_of` gives them for the JSON."""
    steps: list[dict[str, Any]] = []
    turn = 0
    fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        if m := _TURN.match(line):
            turn = int(m[1])
        elif m := _STEP.match(line):
            steps.append(
                {"turn": turn, "scope": m[4] or "main", "step": int(m[1]), "worker": m[2], "source": ""}
                | {"status": "", "cost_usd": round(float(m[3]), 6), "tools": []}
            )
        elif steps and (m := _ROUTE.match(line)) and not steps[-1]["source"]:
            steps[-1]["source"] = m[1]
        elif steps and (m := _TOKENS.match(line)) and not steps[-1]["status"]:
            steps[-1] |= {"prompt_tokens": int(m[1]), "completion_tokens": int(m[3]), "status": m[4]}
        elif steps and (m := _TOOL.match(line)):
            steps[-1]["tools"].append(m[1])
    return [{k: s.get(k) for k in _STEP_KEYS} for s in steps]


_STEP_KEYS = (
    "turn",
    "scope",
    "step",
    "worker",
    "source",
    "status",
    "cost_usd",
    "prompt_tokens",
    "completion_tokens",
    "tools",
)


# --- HTML --------------------------------------------------------------------------------------------------

_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
    "pre{background:#f6f8fa;padding:.6em;overflow:auto}.route{color:#555}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em}"
)


def to_html(doc: Mapping[str, Any]) -> str:
    e = html.escape
    s = doc["session"]
    totals = doc["totals"]
    out = [
        "<!doctype html>",
        f'<html><head><meta charset="utf-8"><title>fugu session {e(s["id"])}</title>',
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>fugu session {e(s['id'])}</h1>",
        f"<p><code>{e(s['cwd'])}</code> · {e(s['mode'])} · router {e(s['router'])} · "
        f"{totals['steps']} steps · ${totals['cost_usd']:.6f}</p>",
    ]
    for t in doc["turns"]:
        out.append(f"<h2>Turn {t['turn']} · {e(t['status'])} · ${t['cost_usd']:.6f}</h2>")
        if t["task"]:
            out.append(f"<blockquote><pre>{e(t['task'])}</pre></blockquote>")
        for step in t["steps"]:
            u = step["usage"]
            p = step["probability"]
            why = (f"p={p:.2f}, " if p is not None else "") + f"{step['latency_ms']:.0f} ms"
            out.append(f"<h3>Step {step['step']} · {e(step['worker'])} · ${u['cost_usd']:.6f}</h3>")
            reason = f" · {e(step['reason'])}" if step["reason"] else ""
            out.append(
                f'<p class="route">route: {e(step["source"])} ({why}){reason} · tokens '
                f"{u['prompt_tokens']} in, {u['completion_tokens']} out</p>"
            )
            for call in step["tools"]:
                out.append(f"<details><summary><code>{e(call['summary'])}</code></summary>")
                if call["diff"]:
                    out.append(f"<pre>{e(call['diff'])}</pre>")
                out.append(f"<pre>{e(call['result'])}</pre></details>")
            if step["text"].strip():
                out.append(f"<pre>{e(step['text'])}</pre>")
        if t["attempts"]:
            items = "".join(f"<li>{e(a['summary'])}</li>" for a in t["attempts"])
            out.append(f"<p><b>Attempts:</b></p><ol>{items}</ol>")
        if t["result"]:
            out.append(f"<p><b>Answer:</b></p><pre>{e(t['result'])}</pre>")
    out.append("<h2>Who did what</h2><table><tr><th>worker</th><th>steps</th><th>cost</th></tr>")
    for name, w in totals["workers"].items():
        out.append(f"<tr><td>{e(name)}</td><td>{w['steps']}</td><td>${w['cost_usd']:.6f}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


# --- helpers -----------------------------------------------------------------------------------------------


def _tool(c: ToolCallRow) -> dict[str, Any]:
    try:
        args: Any = json.loads(c.arguments or "{}")
    except ValueError:
        args = c.arguments
    return {
        "tool": c.tool,
        "summary": tool_summary(c.tool, c.arguments, c.is_error, c.exit_code),
        "arguments": args,
        "result": c.result,
        "is_error": c.is_error,
        "denied": c.denied,
        "exit_code": c.exit_code,
        "duration_ms": c.duration_ms,
        "files": list(c.files),
        "diff": _diff(c.tool, args, c.result) if not (c.denied or c.is_error) else None,
    }


def _diff(tool: str, args: Any, result: str) -> str | None:
    """The change an edit made: the unified diff its result carries (with context lines), else one made
    from its arguments (what it replaced; a write: the whole new file)."""
    if tool not in ("edit_file", "write_file") or not isinstance(args, dict):
        return None
    at = result.find("\n--- ")
    if at >= 0:
        return result[at + 1 :].rstrip("\n") + "\n"
    if not isinstance(args.get("path"), str):
        return None
    path = args["path"]
    if (
        tool == "edit_file"
        and isinstance(args.get("old_text"), str)
        and isinstance(args.get("new_text"), str)
    ):
        old, new, source = args["old_text"], args["new_text"], f"a/{path}"
    elif tool == "write_file" and isinstance(args.get("content"), str):
        old, new, source = "", args["content"], "/dev/null"
    else:
        return None
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), source, f"b/{path}", n=2
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _totals(turns: list[dict[str, Any]]) -> dict[str, Any]:
    workers: dict[str, dict[str, Any]] = {}
    count, cost = 0, 0.0
    for t in turns:
        for s in t["steps"]:
            w = workers.setdefault(s["worker"], {"steps": 0, "cost_usd": 0.0})
            w["steps"] += 1
            w["cost_usd"] += s["usage"]["cost_usd"]
            count += 1
            cost += s["usage"]["cost_usd"]
    return {"steps": count, "cost_usd": cost, "workers": workers}


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.rstrip().splitlines())


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
