"""The ledger: the append-only record of what each agent did (route decisions, steps, tool calls, messages).

One `Ledger` per transcript ("scope": "main" in fugu mode, one per workflow step in ultra mode); `turn(n)`
binds it to one turn. Written after every step so a crash loses nothing (serve's pass-through, answering from
its event loop, writes a call's rows just after its reply: serve/passthrough.py, `Held`). Never prints; the
SQL is the store's.
"""

from __future__ import annotations

from dataclasses import dataclass

from fugu_cli.store import (
    CompactionRecord,
    CompactionRow,
    HookRunRecord,
    StepRecord,
    StepRow,
    Store,
    ToolCallRow,
)
from fugu_cli.types import AttemptRecord, Message, RouteDecision, ToolCall, ToolResult

__all__ = [
    "CompactionRecord",
    "CompactionRow",
    "HookRunRecord",
    "Ledger",
    "StepRecord",
    "StepRow",
    "ToolCallRow",
    "TurnLedger",
]


class Ledger:
    def __init__(self, store: Store, session_id: str, scope: str = "main") -> None:
        self.store = store
        self.session_id = session_id
        self.scope = scope

    def turn(self, turn: int) -> TurnLedger:
        return TurnLedger(self, turn)

    def tool_calls(self, turn: int | None = None) -> list[ToolCallRow]:
        return self.store.tool_calls(self.session_id, self.scope, turn)

    def steps(self) -> list[StepRow]:
        """Each step with the route decision that chose its worker (the last one made for that step)."""
        return self.store.steps(self.session_id, self.scope)

    def transcript(self) -> list[Message]:
        """The transcript a worker sees: compacted where it was compacted (the store keeps every message)."""
        return self.store.transcript(self.session_id, self.scope)

    def message_count(self) -> int:
        return self.store.message_count(self.session_id, self.scope)

    def compactions(self) -> list[CompactionRow]:
        return self.store.compactions(self.session_id, self.scope)

    def hook_runs(self) -> list[HookRunRecord]:
        return self.store.hook_runs(self.session_id, self.scope)

    def attempts(self) -> list[tuple[int, AttemptRecord]]:
        """(turn, attempt) for each attempt of the session that was recorded (with a check, or evidence)."""
        return self.store.attempts(self.session_id)

    def sibling(self, scope: str) -> Ledger:
        """The ledger of another transcript of the same session."""
        return Ledger(self.store, self.session_id, scope)

    def all_scopes(self) -> list[Ledger]:
        """This session's ledgers: this one first, then every other scope that has steps."""
        names = self.store.scopes(self.session_id)
        return [self, *(self.sibling(n) for n in names if n != self.scope)]


@dataclass(frozen=True)
class TurnLedger:
    """A ledger bound to one turn: what an agent writes while it works on that turn."""

    ledger: Ledger
    turn: int

    def route(self, step: int, decision: RouteDecision) -> None:
        self._store.add_route(self._sid, self._scope, self.turn, step, decision)

    def step(self, record: StepRecord) -> None:
        self._store.add_step(self._sid, self._scope, self.turn, record)

    def tool_call(self, step: int, agent: str, call: ToolCall, result: ToolResult) -> None:
        self._store.add_tool_call(self._sid, self._scope, self.turn, step, agent, call, result)

    def message(self, message: Message) -> None:
        self._store.append_message(self._sid, self._scope, self.turn, message)

    def hook_run(self, record: HookRunRecord) -> None:
        self._store.add_hook_run(self._sid, self._scope, self.turn, record)

    def attempt(self, number: int, record: AttemptRecord, output: str = "") -> None:
        """An attempt at this turn ended and its evidence is known (`output`: the check's, kept bounded)."""
        self._store.add_attempt(self._sid, self.turn, number, record, output)

    def compacted(self, record: CompactionRecord) -> int:
        """Record that the transcript is now `record.head` plus its last `record.kept` stored messages."""
        return self._store.add_compaction(self._sid, self._scope, self.turn, record)

    @property
    def _store(self) -> Store:
        return self.ledger.store

    @property
    def _sid(self) -> str:
        return self.ledger.session_id

    @property
    def _scope(self) -> str:
        return self.ledger.scope
