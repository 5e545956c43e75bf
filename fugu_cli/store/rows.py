"""The typed rows the store writes and reads: what the rest of fugu passes it and gets back. No SQL here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fugu_cli.types import Message, RouteDecision, Usage


@dataclass(frozen=True)
class SessionRow:
    id: str
    created_at: float
    updated_at: float
    cwd: str
    title: str
    mode: str
    status: str
    pool_json: str
    router: str
    cost_usd: float


@dataclass(frozen=True)
class TurnRow:
    """One user message and how it ended (`status` is `running` while, or if, it never finished)."""

    turn: int
    task: str
    status: str
    result: str
    cost_usd: float
    created_at: float


@dataclass(frozen=True)
class EditCheckpointRow:
    """A state of the tree a session can go back to (`/rewind`): before turn `turn` first changed it
    (`kind` "turn"), or right after the call `call_id` may have changed it ("edit"). `messages`: how many
    messages the main transcript had stored then."""

    seq: int
    turn: int
    kind: str
    sha: str
    call_id: str
    tool: str
    messages: int
    created_at: float


@dataclass(frozen=True)
class ToolCallRow:
    turn: int
    step: int
    agent: str
    call_id: str
    tool: str
    arguments: str
    result: str
    is_error: bool
    denied: bool
    exit_code: int | None
    duration_ms: float
    files: tuple[str, ...]


@dataclass(frozen=True)
class StepRow:
    """A step with the route decision that chose its worker (the last one made for that step)."""

    turn: int
    step: int
    worker: str
    source: str
    role: str | None
    status: str
    usage: Usage
    text: str
    scores: dict[str, float]
    reason: str
    latency_ms: float
    started_at: float = 0.0
    finished_at: float = 0.0


@dataclass(frozen=True)
class StepRecord:
    """What the ledger writes for one step (one LLM call and its tool calls)."""

    step: int
    decision: RouteDecision
    status: str  # ok | interrupted | provider_error
    usage: Usage
    text: str
    started_at: float


@dataclass(frozen=True)
class CompactionRecord:
    """One compaction: `head` replaces every stored message of the scope before the last `kept` ones."""

    head: tuple[Message, ...]
    kept: int
    tokens_before: int
    tokens_after: int
    trigger: str  # threshold | no-fit | overflow | user
    worker: str  # whose tokenizer counted the tokens
    summarizer: str = ""
    focus: str = ""


@dataclass(frozen=True)
class CompactionRow:
    turn: int
    upto: int
    head: tuple[Message, ...]
    tokens_before: int
    tokens_after: int
    trigger: str
    worker: str
    summarizer: str
    focus: str
    created_at: float


@dataclass(frozen=True)
class HookRunRecord:
    """One run of a hook command: where it ran, how it ended and what fugu made of it (`outcome`: ok,
    blocked, denied, allowed, asked, modified, context, error, timeout)."""

    event: str
    matcher: str
    command: str
    exit_code: int | None
    timed_out: bool
    outcome: str
    stdout: str
    stderr: str
    duration_ms: float
    agent: str = ""
    tool: str = ""
    call_id: str = ""
    step: int = 0
    turn: int = 0


@dataclass(frozen=True)
class FactRow:
    workflow: int
    kind: str
    key: str
    value: str
    agent: str


@dataclass(frozen=True)
class OutcomeRow:
    task: str
    worker: str
    reward: float
    cost_usd: float
    source: str
    session_id: str | None


@dataclass(frozen=True)
class TableRows:
    """One table's rows of one session, in the order they were written."""

    table: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class SessionExport:
    """Every row of one session (its ledger, transcript, memory, compactions, hook runs and outcomes), as
    another store can import it: what a cluster node running an eval job ships back to the store of the user
    who ran it."""

    session_id: str
    schema: int  # the exporting store's schema version
    tables: tuple[TableRows, ...]

    def rows(self, table: str) -> tuple[tuple[Any, ...], ...]:
        return next((t.rows for t in self.tables if t.table == table), ())
