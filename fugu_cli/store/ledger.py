"""The ledger's tables: route decisions, steps, tool calls and hook runs (one scope per transcript), the
memory's facts, and eval outcomes. Every text is redacted as it is written. Never prints."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from fugu_cli.redact import redact
from fugu_cli.store.connection import Connection
from fugu_cli.store.rows import (
    FactRow,
    HookRunRecord,
    OutcomeRow,
    StepRecord,
    StepRow,
    ToolCallRow,
)
from fugu_cli.types import AttemptRecord, RouteDecision, ToolCall, ToolResult, Usage, dumps

_HOOK_CAP = 8000  # characters of a hook's stdout or stderr kept in the ledger


class LedgerTables(Connection):
    """Who did what, at what cost, and what came of it."""

    # the ledger: route decisions, steps, tool calls (one scope per transcript)

    def add_route(self, sid: str, scope: str, turn: int, step: int, d: RouteDecision) -> None:
        self._execute(
            "INSERT INTO route_decisions (session_id, scope, turn, step, worker, source, role, scores_json,"
            " latency_ms, reason, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                sid,
                scope,
                turn,
                step,
                d.worker,
                d.source,
                d.role,
                dumps({k: float(v) for k, v in d.scores.items()}),
                d.latency_ms,
                redact(d.reason),
                time.time(),
            ),
        )

    def add_step(self, sid: str, scope: str, turn: int, r: StepRecord) -> None:
        u = r.usage
        with self._transaction() as db:
            db.execute(
                "INSERT INTO steps (session_id, scope, turn, step, worker, source, role, status,"
                " prompt_tokens, completion_tokens, cached_tokens, cost_usd, text, started_at, finished_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sid,
                    scope,
                    turn,
                    r.step,
                    r.decision.worker,
                    r.decision.source,
                    r.decision.role,
                    r.status,
                    u.prompt_tokens,
                    u.completion_tokens,
                    u.cached_tokens,
                    u.cost_usd,
                    redact(r.text),
                    r.started_at,
                    time.time(),
                ),
            )
            db.execute(
                "UPDATE sessions SET updated_at=?, cost_usd=cost_usd+? WHERE id=?",
                (time.time(), u.cost_usd, sid),
            )

    def add_tool_call(
        self, sid: str, scope: str, turn: int, step: int, agent: str, call: ToolCall, result: ToolResult
    ) -> None:
        self._execute(
            "INSERT INTO tool_calls (session_id, scope, turn, step, agent, call_id, tool, arguments, result,"
            " is_error, denied, exit_code, duration_ms, files_json, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                sid,
                scope,
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

    def tool_calls(self, sid: str, scope: str, turn: int | None = None) -> list[ToolCallRow]:
        sql = "SELECT * FROM tool_calls WHERE session_id=? AND scope=?"
        args: list[object] = [sid, scope]
        if turn is not None:
            sql += " AND turn=?"
            args.append(turn)
        return [
            ToolCallRow(
                turn=r["turn"],
                step=r["step"],
                agent=r["agent"],
                call_id=r["call_id"],
                tool=r["tool"],
                arguments=r["arguments"],
                result=r["result"],
                is_error=bool(r["is_error"]),
                denied=bool(r["denied"]),
                exit_code=r["exit_code"],
                duration_ms=r["duration_ms"],
                files=tuple(json.loads(r["files_json"])),
            )
            for r in self.query(sql + " ORDER BY rowid", args)
        ]

    def steps(self, sid: str, scope: str) -> list[StepRow]:
        decisions: dict[tuple[int, int], tuple[dict[str, float], str, float]] = {}
        for r in self.query(
            "SELECT * FROM route_decisions WHERE session_id=? AND scope=? ORDER BY rowid", (sid, scope)
        ):
            decisions[(r["turn"], r["step"])] = (json.loads(r["scores_json"]), r["reason"], r["latency_ms"])
        out: list[StepRow] = []
        for r in self.query(
            "SELECT * FROM steps WHERE session_id=? AND scope=? ORDER BY rowid", (sid, scope)
        ):
            scores, reason, latency = decisions.get((r["turn"], r["step"]), ({}, "", 0.0))
            out.append(
                StepRow(
                    turn=r["turn"],
                    step=r["step"],
                    worker=r["worker"],
                    source=r["source"],
                    role=r["role"],
                    status=r["status"],
                    usage=Usage(
                        r["prompt_tokens"], r["completion_tokens"], r["cached_tokens"], r["cost_usd"]
                    ),
                    text=r["text"],
                    scores=scores,
                    reason=reason,
                    latency_ms=latency,
                    started_at=r["started_at"],
                    finished_at=r["finished_at"],
                )
            )
        return out

    def scopes(self, sid: str) -> list[str]:
        """The session's ledger scopes in order of first use ("main", then ultra mode's "wf1.s0", ...)."""
        rows = self.query(
            "SELECT scope FROM steps WHERE session_id=? GROUP BY scope ORDER BY MIN(rowid)", (sid,)
        )
        return [r["scope"] for r in rows]

    # hooks

    def add_hook_run(self, sid: str, scope: str, turn: int, r: HookRunRecord) -> None:
        self._execute(
            "INSERT INTO hook_runs (session_id, scope, turn, step, agent, event, matcher, command, tool,"
            " call_id, exit_code, timed_out, outcome, stdout, stderr, duration_ms, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                *(sid, scope, turn, r.step, r.agent, r.event, r.matcher, redact(r.command), r.tool),
                *(r.call_id, r.exit_code, int(r.timed_out), r.outcome, redact(r.stdout[:_HOOK_CAP])),
                *(redact(r.stderr[:_HOOK_CAP]), r.duration_ms, time.time()),
            ),
        )

    def hook_runs(self, sid: str, scope: str | None = None) -> list[HookRunRecord]:
        sql, args = "SELECT * FROM hook_runs WHERE session_id=?", [sid]
        if scope is not None:
            sql, args = sql + " AND scope=?", [sid, scope]
        return [
            HookRunRecord(
                *(r["event"], r["matcher"], r["command"], r["exit_code"], bool(r["timed_out"]), r["outcome"]),
                *(r["stdout"], r["stderr"], r["duration_ms"], r["agent"], r["tool"], r["call_id"], r["step"]),
                turn=r["turn"],
            )
            for r in self.query(sql + " ORDER BY rowid", args)
        ]

    # attempts at a turn and their evidence (a check, the worker's own tests)

    def add_attempt(self, sid: str, turn: int, attempt: int, a: AttemptRecord, output: str = "") -> None:
        self._execute(
            "INSERT INTO attempts (session_id, turn, attempt, worker, cost_usd, steps, status, outcome,"
            " evidence, command, exit_code, set_aside, output, created_at)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                *(sid, turn, attempt, a.worker, a.cost_usd, a.steps, a.status, a.check, a.evidence),
                *(redact(a.command), a.exit_code, a.set_aside, redact(output[-_HOOK_CAP:]), time.time()),
            ),
        )

    def attempts(self, sid: str) -> list[tuple[int, AttemptRecord]]:
        """(turn, attempt) for every attempt recorded in session `sid`, in order."""
        rows = self.query("SELECT * FROM attempts WHERE session_id=? ORDER BY rowid", [sid])
        return [
            (
                r["turn"],
                AttemptRecord(
                    *(r["worker"], r["cost_usd"], r["steps"], r["outcome"], r["evidence"], r["command"]),
                    *(r["exit_code"], r["set_aside"], r["status"]),
                ),
            )
            for r in rows
        ]

    # memory across ultra-mode workflows

    def add_facts(self, sid: str, workflow: int, facts: Sequence[FactRow]) -> None:
        now = time.time()
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO memory_facts (session_id, workflow, kind, key, value, agent, created_at)"
                " VALUES (?,?,?,?,?,?,?)",
                [(sid, workflow, f.kind, redact(f.key), redact(f.value), f.agent, now) for f in facts],
            )

    def facts(self, sid: str) -> list[FactRow]:
        rows = self.query(
            "SELECT workflow, kind, key, value, agent FROM memory_facts WHERE session_id=? ORDER BY rowid",
            (sid,),
        )
        return [FactRow(r["workflow"], r["kind"], r["key"], r["value"], r["agent"]) for r in rows]

    def last_workflow(self, sid: str) -> int:
        rows = self.query("SELECT MAX(workflow) AS n FROM memory_facts WHERE session_id=?", (sid,))
        return int(rows[0]["n"] or 0)

    # outcomes: what router training learns from

    def add_outcome(self, row: OutcomeRow) -> None:
        self._execute(
            "INSERT INTO outcomes (task, worker, reward, cost_usd, source, session_id, created_at)"
            " VALUES (?,?,?,?,?,?,?)",
            (redact(row.task), row.worker, row.reward, row.cost_usd, row.source, row.session_id, time.time()),
        )

    def outcomes(self) -> list[OutcomeRow]:
        rows = self.query(
            "SELECT task, worker, reward, cost_usd, source, session_id FROM outcomes ORDER BY rowid"
        )
        return [
            OutcomeRow(r["task"], r["worker"], r["reward"], r["cost_usd"], r["source"], r["session_id"])
            for r in rows
        ]
