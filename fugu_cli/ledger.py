"""The ledger: the append-only record of what each agent did (route decisions, steps, tool calls).

One `Ledger` per transcript ("scope": "main" in fugu mode, one per workflow step in ultra mode). Written after
every step so a crash loses nothing. Never prints.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass

from fugu_cli.store import Store, redact
from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, Usage, dumps


@dataclass(frozen=True)
class ToolCallRow:
    turn: int
    step: int
    agent: str
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


class Ledger:
    def __init__(self, store: Store, session_id: str, scope: str = "main") -> None:
        self.store = store
        self.session_id = session_id
        self.scope = scope

    def route(self, turn: int, step: int, d: RouteDecision) -> None:
        self.store.execute(
            "INSERT INTO route_decisions (session_id, scope, turn, step, worker, source, role, scores_json,"
            " latency_ms, reason, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.session_id,
                self.scope,
                turn,
                step,
                d.worker,
                d.source,
                d.role,
                dumps({k: float(v) for k, v in d.scores.items()}),
                d.latency_ms,
                d.reason,
                time.time(),
            ),
        )

    def tool_call(self, turn: int, step: int, agent: str, call: ToolCall, result: ToolResult) -> None:
        self.store.execute(
            "INSERT INTO tool_calls (session_id, scope, turn, step, agent, call_id, tool, arguments, result,"
            " is_error, denied, exit_code, duration_ms, files_json, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.session_id,
                self.scope,
                turn,
                step,
                agent,
                call.id,
                call.name,
                redact(call.arguments),
                redact(result.content),
                int(result.is_error),
                int(result.denied),
                result.exit_code,
                result.duration_ms,
                dumps(list(result.files_touched)),
                time.time(),
            ),
        )

    def step(
        self,
        turn: int,
        step: int,
        decision: RouteDecision,
        status: str,
        usage: Usage,
        text: str,
        started_at: float,
    ) -> None:
        self.store.execute(
            "INSERT INTO steps (session_id, scope, turn, step, worker, source, role, status, prompt_tokens,"
            " completion_tokens, cached_tokens, cost_usd, text, started_at, finished_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                self.session_id,
                self.scope,
                turn,
                step,
                decision.worker,
                decision.source,
                decision.role,
                status,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens,
                usage.cost_usd,
                redact(text),
                started_at,
                time.time(),
            ),
        )
        self.store.touch_session(self.session_id, cost_delta=usage.cost_usd)

    def message(self, turn: int, seq: int, message: Message) -> None:
        if message.content:
            message = dataclasses.replace(message, content=redact(message.content))
        self.store.append_message(self.session_id, self.scope, turn, seq, message)

    # reading

    def tool_calls(self, turn: int | None = None) -> list[ToolCallRow]:
        sql = "SELECT * FROM tool_calls WHERE session_id=? AND scope=?"
        args: list[object] = [self.session_id, self.scope]
        if turn is not None:
            sql += " AND turn=?"
            args.append(turn)
        rows = self.store.query(sql + " ORDER BY rowid", args)
        return [
            ToolCallRow(
                r["turn"],
                r["step"],
                r["agent"],
                r["tool"],
                r["arguments"],
                r["result"],
                bool(r["is_error"]),
                bool(r["denied"]),
                r["exit_code"],
                r["duration_ms"],
                tuple(json.loads(r["files_json"])),
            )
            for r in rows
        ]

    def steps(self) -> list[StepRow]:
        """Each step with the route decision that chose its worker (the last one made for that step)."""
        decisions: dict[tuple[int, int], tuple[dict[str, float], str, float]] = {}
        for r in self.store.query(
            "SELECT * FROM route_decisions WHERE session_id=? AND scope=? ORDER BY rowid",
            (self.session_id, self.scope),
        ):
            decisions[(r["turn"], r["step"])] = (json.loads(r["scores_json"]), r["reason"], r["latency_ms"])
        out: list[StepRow] = []
        for r in self.store.query(
            "SELECT * FROM steps WHERE session_id=? AND scope=? ORDER BY rowid", (self.session_id, self.scope)
        ):
            scores, reason, latency = decisions.get((r["turn"], r["step"]), ({}, "", 0.0))
            usage = Usage(r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"], r["cost_usd"])
            out.append(
                StepRow(
                    r["turn"],
                    r["step"],
                    r["worker"],
                    r["source"],
                    r["role"],
                    r["status"],
                    usage,
                    r["text"],
                    scores,
                    reason,
                    latency,
                )
            )
        return out


def scopes(store: Store, session_id: str) -> list[str]:
    rows = store.query(
        "SELECT scope FROM steps WHERE session_id=? GROUP BY scope ORDER BY MIN(rowid)", (session_id,)
    )
    return [r["scope"] for r in rows]
