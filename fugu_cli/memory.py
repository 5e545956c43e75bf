"""Session memory across ultra-mode workflows: what the environment told the agents, distilled and compact.

Facts come from ledger rows (files read with a hash of the text read, commands with exit codes and a test
summary, edits applied to the user's tree) and live in the store's `memory_facts` table. Never prints, and
never imports the session or the agent: the conductor feeds it ledger scopes and reads back a text block.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fugu_cli.ledger import Ledger, ToolCallRow
from fugu_cli.store import FactRow, Store

MAX_FACTS = 60
MAX_BLOCK_CHARS = 4000
_NUMBERED = re.compile(r"^\s*\d+\t(.*)$")
_TEST_CMD = re.compile(
    r"\b(pytest|unittest|tox|nox|jest|vitest|mocha|go test|cargo test|npm test|yarn test|test)"
)
_TEST_LINE = re.compile(
    r"(\d+ (passed|failed|errors?)\b|^(OK|FAILED)\b|\bTests? run\b|\btests? (passed|failed)\b|^(ok|FAIL)\s)",
    re.IGNORECASE,
)
_DIFF_HEAD = re.compile(r"^diff --git a/(.+) b/(.+)$")
_KIND_ORDER = {"edit": 0, "test": 1, "command": 2, "read": 3}


@dataclass(frozen=True)
class Fact:
    """One thing the environment said. `key` identifies it (path or command); the latest value wins."""

    kind: str  # read | command | test | edit
    key: str
    value: str
    agent: str
    workflow: int = 0


def text_hash(text: str) -> str:
    """sha1 (12 hex) of a text's lines joined by newlines: equal for a file and for a full read of it."""
    return hashlib.sha1("\n".join(text.splitlines()).encode("utf-8")).hexdigest()[:12]


def file_hash(path: Path) -> str | None:
    try:
        return text_hash(path.read_bytes().decode("utf-8", errors="replace"))
    except OSError:
        return None


def facts_from_calls(rows: Iterable[ToolCallRow]) -> list[Fact]:
    """The facts in one agent's tool calls (errors and refusals teach nothing about the tree)."""
    out: list[Fact] = []
    for row in rows:
        if row.denied:
            continue
        args = _arguments(row.arguments)
        if row.tool == "read_file" and not row.is_error and args.get("path"):
            fact = _read_fact(str(args["path"]), row)
            if fact:
                out.append(fact)
        elif row.tool == "shell" and args.get("command") and row.exit_code is not None:
            command = " ".join(str(args["command"]).split())[:200]
            tail = _last_line(row.result)
            out.append(
                Fact("command", command, f"exit {row.exit_code}" + (f": {tail}" if tail else ""), row.agent)
            )
            summary = _test_summary(command, row.result)
            if summary:
                out.append(Fact("test", command, summary, row.agent))
    return out


def facts_from_patch(patch: str, agent: str) -> list[Fact]:
    """Edits applied to the user's tree: one fact per file of a git patch, with its +added -removed counts."""
    counts: dict[str, list[int]] = {}
    current: list[int] | None = None
    for line in patch.splitlines():
        head = _DIFF_HEAD.match(line)
        if head:
            current = counts.setdefault(head.group(2), [0, 0])
        elif current is not None and line.startswith("+") and not line.startswith("+++ "):
            current[0] += 1
        elif current is not None and line.startswith("-") and not line.startswith("--- "):
            current[1] += 1
    return [Fact("edit", path, f"+{a} -{r}", agent) for path, (a, r) in counts.items()]


def patch_files(patch: str) -> list[str]:
    return [m.group(2) for m in map(_DIFF_HEAD.match, patch.splitlines()) if m]


def _read_fact(path: str, row: ToolCallRow) -> Fact | None:
    lines = row.result.splitlines()
    body = [m.group(1) for m in map(_NUMBERED.match, lines) if m]
    if not body:
        return None
    partial = any(line.startswith("[showing lines") for line in lines)
    first = lines[0].split("\t", 1)[0].strip()
    if partial or first != "1":
        last = len(body) + int(first) - 1 if first.isdigit() else len(body)
        return Fact("read", path, f"lines {first}-{last} read", row.agent)
    return Fact("read", path, f"sha1 {text_hash(chr(10).join(body))}, {len(body)} lines", row.agent)


def _test_summary(command: str, output: str) -> str | None:
    if not _TEST_CMD.search(command):
        return None
    hits = [line.strip() for line in output.splitlines() if _TEST_LINE.search(line.strip())]
    return hits[-1][:160] if hits else None


def _last_line(output: str) -> str:
    lines = [
        line.strip() for line in output.splitlines() if line.strip() and not line.startswith("[exit code")
    ]
    lines = [line for line in lines if not line.startswith("[no output")]
    return lines[-1][:120] if lines else ""


def _arguments(raw: str) -> dict[str, object]:
    try:
        data = json.loads(raw or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# storage


def record(store: Store, session_id: str, workflow: int, facts: Sequence[Fact]) -> None:
    store.add_facts(session_id, workflow, [FactRow(workflow, f.kind, f.key, f.value, f.agent) for f in facts])


def distil(
    store: Store, session_id: str, workflow: int, scopes: Sequence[str], extra: Sequence[Fact] = ()
) -> int:
    """Store the facts of `scopes` (the workflow's ledgers) plus `extra`; returns how many were kept."""
    facts: list[Fact] = []
    for scope in scopes:
        facts.extend(facts_from_calls(Ledger(store, session_id, scope).tool_calls()))
    facts.extend(extra)
    kept = _dedupe(facts)
    if kept:
        record(store, session_id, workflow, kept)
    return len(kept)


def facts(store: Store, session_id: str, limit: int = MAX_FACTS) -> list[Fact]:
    """The session's memory: the latest fact per (kind, key), newest first, at most `limit`."""
    rows = store.facts(session_id)
    latest = _dedupe(Fact(r.kind, r.key, r.value, r.agent, r.workflow) for r in rows)
    return list(reversed(latest))[:limit]


def _dedupe(items: Iterable[Fact]) -> list[Fact]:
    by_key: dict[tuple[str, str], Fact] = {}
    for f in items:
        by_key.pop((f.kind, f.key), None)
        by_key[(f.kind, f.key)] = f
    return list(by_key.values())


def last_workflow(store: Store, session_id: str) -> int:
    return store.last_workflow(session_id)


# rendering


def context_block(
    store: Store, session_id: str, root: Path | None = None, max_chars: int = MAX_BLOCK_CHARS
) -> str:
    """The compact block given to later agents ('' when there is no memory yet).

    With `root`, a file whose hash no longer matches is marked "changed since": an agent should re-read it.
    """
    items = sorted(facts(store, session_id), key=lambda f: (_KIND_ORDER.get(f.kind, 9), -f.workflow))
    title = (
        "Memory from earlier workflows of this session (what the environment reported; verify what matters):"
    )
    return facts_text(items, title, root, max_chars)


def transcript_facts(rows: Iterable[ToolCallRow]) -> list[Fact]:
    """The latest fact per (kind, key) in a transcript's tool calls, edits and tests first, newest first."""
    rows = list(rows)
    found = facts_from_calls(rows) + [f for r in rows for f in _edit_facts(r)]
    latest = list(reversed(_dedupe(found)))
    return sorted(latest, key=lambda f: _KIND_ORDER.get(f.kind, 9))


def _edit_facts(row: ToolCallRow) -> list[Fact]:
    if row.tool not in ("edit_file", "write_file") or row.is_error or row.denied:
        return []
    lines = row.result.splitlines()
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    return [Fact("edit", path, f"+{added} -{removed}", row.agent) for path in row.files]


def facts_text(
    items: Sequence[Fact], title: str, root: Path | None = None, max_chars: int = MAX_BLOCK_CHARS
) -> str:
    """`items` as a titled list of lines within `max_chars` ('' when there are none)."""
    if not items:
        return ""
    lines = [title]
    for f in items:
        line = f"- {_line(f)}"
        if root is not None and f.kind == "read" and f.value.startswith("sha1 "):
            now = file_hash(root / f.key)
            line += "" if now and f.value.startswith(f"sha1 {now}") else " (changed since)"
        if sum(len(x) + 1 for x in lines) + len(line) > max_chars:
            lines.append(f"- … {len(items) - len(lines) + 1} older facts left out")
            break
        lines.append(line)
    return "\n".join(lines)


def _line(f: Fact) -> str:
    if f.kind == "read":
        return f"read {f.key}: {f.value}"
    if f.kind == "command":
        return f"$ {f.key} → {f.value}"
    if f.kind == "test":
        return f"tests ({f.key}): {f.value}"
    if f.kind == "edit":
        return f"edited {f.key} ({f.value}), applied to the user's tree"
    return f"{f.kind} {f.key}: {f.value}"


def render(store: Store, session_id: str) -> str:
    """What `/memory` shows: every remembered fact, grouped by workflow, with the agent that learned it."""
    items = facts(store, session_id)
    if not items:
        return "No memory yet: facts are kept after each ultra-mode workflow (/ultra on)."
    out: list[str] = [f"Memory of session {session_id} ({len(items)} facts):"]
    for wf in sorted({f.workflow for f in items}):
        out.append(f"workflow {wf}:")
        for f in sorted((f for f in items if f.workflow == wf), key=lambda f: _KIND_ORDER.get(f.kind, 9)):
            out.append(f"  {_line(f)}  [{f.agent}]")
    return "\n".join(out)
