"""Models `fugu-agent`, `fugu-ultra` and `fugu/<worker>`: fugu's own agent in the served repository.

Owns the live agent sessions (found by a server-issued id or by the conversation's prefix), one lock per
session and one for the working tree (taken only when the agent may write), and the rule that a turn which
changed files is never run again for a repeated identical request: the repeat gets the first answer back.
Blocking code: the server runs it in worker threads. Never prints.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.app import Resolved, assemble
from fugu_cli.calls import AllFailed, Call, Exclusions, Try
from fugu_cli.errors import ProviderError
from fugu_cli.events import Emit
from fugu_cli.llm.forward import Forwarded, Forwarder
from fugu_cli.serve.conversation import Conversations, chain
from fugu_cli.serve.params import ChatRequest, text_of
from fugu_cli.serve.wire import ApiError
from fugu_cli.session import Session
from fugu_cli.store import Store
from fugu_cli.types import Message, RouteDecision, TurnResult

WRITING_MODES = ("auto-edit", "full-auto")
_SHAPE = (
    "Rewrite the answer below as JSON only, with no other text. Keep its facts; invent nothing.{schema}\n\n"
    "Answer:\n{answer}"
)


@dataclass(frozen=True)
class Done:
    """A finished turn as a repeat of its request would get it back."""

    fingerprint: str
    result: TurnResult
    answer: str
    changed: bool  # the turn began changing files (its checkpoint was taken)


@dataclass
class Slot:
    session: Session
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: Done | None = None
    said: set[str] = field(default_factory=set)  # notes already in this session's ledger


@dataclass(frozen=True)
class Finished:
    result: TurnResult
    answer: str
    replayed: bool = False


class AgentSessions:
    def __init__(
        self, resolved: Resolved, store: Store, forwarder: Forwarder, root: Path, max_live: int = 64
    ) -> None:
        self.resolved = resolved
        self.store = store
        self.forwarder = forwarder
        self.calls = resolved.worker_call()
        self.root = root
        self.max_live = max_live
        mode = resolved.options.permission_mode or resolved.config.permission_mode
        self.tree_lock = threading.Lock() if mode in WRITING_MODES else None
        self.conversations = Conversations()
        self._live: OrderedDict[str, Slot] = OrderedDict()
        self._table = threading.Lock()

    def slot_for(self, req: ChatRequest) -> tuple[Slot, list[Message]]:
        """The session this request continues and the messages it brings that the session has not seen;
        or a new session seeded with the request's history."""
        names = self.resolved.names
        if req.worker is not None and req.worker not in names:
            usable = ", ".join(f"fugu/{n}" for n in names)
            raise ApiError(
                404,
                f"The model fugu/{req.worker} does not exist: usable workers are {usable}",
                code="model_not_found",
                param="model",
            )
        if req.session:
            return self._named(req.session, req.session), []
        digests = chain(req.messages)
        found = self.conversations.find(digests)
        if found is not None:
            sid, known = found
            slot = self._named(sid, None)
            last = _last_user(req.messages)
            if known == len(req.messages):  # this very request again: only a repeat of the last turn counts
                if slot.last is not None and slot.last.fingerprint == req.fingerprint:
                    return slot, []
            elif known <= last:
                return slot, context(req.messages[known:last])
        slot = Slot(assemble(self.resolved, store=self.store))
        self._keep(slot)
        return slot, context(req.messages[: _last_user(req.messages)])

    def run(
        self, slot: Slot, new: Sequence[Message], req: ChatRequest, emit: Emit, cancel: threading.Event
    ) -> Finished | None:
        """One turn under the session's lock (and the tree's); None when the client left before it began."""
        with slot.lock:
            if cancel.is_set():
                return None
            last = slot.last
            if last is not None and last.fingerprint == req.fingerprint and last.changed:
                return Finished(last.result, last.answer, replayed=True)
            session = slot.session
            with self.tree_lock or _NO_LOCK:
                if cancel.is_set():
                    return None
                session.add_context(new)
                session.set_ultra(req.mode == "ultra")
                session.set_worker(req.worker)
                result = session.run_turn(req.task, emit, cancel, stream=req.stream)
            for note in (n for n in req.notes if n not in slot.said):  # said once per session
                self.store.add_note(session.id, session.turn, 0, note)
                slot.said.add(note)
            changed = session.turn in session.checkpoints
            answer = self._shape(result, req) if result.status == "success" else result.result
            slot.last = Done(req.fingerprint, result, answer, changed)
        digests = chain(req.messages)
        self.conversations.remember(digests[-1], session.id)
        reply = chain([{"role": "assistant", "content": answer}], digests[-1])[-1]
        self.conversations.remember(reply, session.id)
        return Finished(result, answer)

    @property
    def live(self) -> list[Session]:
        """The sessions held in memory, least recently used first."""
        with self._table:
            return [slot.session for slot in self._live.values()]

    def _named(self, sid: str, asked: str | None) -> Slot:
        with self._table:
            slot = self._live.get(sid)
            if slot is not None:
                self._live.move_to_end(sid)
                return slot
        row = self.store.get_session(sid)
        if row is None or row.mode == "pass" or row.cwd != str(self.root):
            raise ApiError(
                404,
                f"no agent session {asked or sid} in this repository: send an id fugu issued (the "
                "X-Fugu-Session header of an earlier reply), or none to start a session",
                code="session_not_found",
                param="session_id",
            )
        opts = dataclasses.replace(self.resolved.options, resume=row.id)
        return self._keep(Slot(assemble(self.resolved, opts, store=self.store)))

    def _keep(self, slot: Slot) -> Slot:
        with self._table:
            existing = self._live.get(slot.session.id)
            if existing is not None:  # two requests resumed it at once: one object for both
                return existing
            self._live[slot.session.id] = slot
            evicted = []
            while len(self._live) > self.max_live:  # evicted sessions are still resumable by id
                evicted.append(self._live.popitem(last=False)[1])
        for old in evicted:
            with old.lock:  # after its running turn, if any: its MCP servers stop with it
                old.session.close()
        return slot

    def close(self) -> None:
        """Stop the live sessions' MCP servers (the server is shutting down)."""
        with self._table:
            slots = list(self._live.values())
        for slot in slots:
            slot.session.close()

    def _shape(self, result: TurnResult, req: ChatRequest) -> str:
        """The answer with the request's `response_format` and `stop` applied."""
        answer = result.result
        if req.response_format is not None:
            answer = self._as_json(answer, req.response_format, list(result.workers))
        for stop in req.stop:
            answer = answer.split(stop, 1)[0]
        return answer

    def _as_json(self, answer: str, response_format: dict[str, Any], used: list[str]) -> str:
        spec = response_format.get("json_schema") or {}
        schema = f"\nThe JSON must match this schema:\n{spec['schema']}" if "schema" in spec else ""
        pool = {w.name: w for w in self.resolved.pool}
        order = [*reversed([n for n in used if n in pool]), *sorted(pool, key=lambda n: -pool[n].priority)]
        prompt = _SHAPE.format(schema=schema, answer=answer)
        params = {"messages": [{"role": "user", "content": prompt}], "response_format": response_format}
        ranked = list(dict.fromkeys(order))

        def route(ex: Exclusions) -> RouteDecision:
            left = [n for n in ranked if n not in ex.names]
            if not left:
                raise LookupError("no worker left")
            return RouteDecision(left[0], {}, "prior", 0.0, reason="the answer as JSON")

        def send(attempt: Try) -> Forwarded:
            return self.forwarder.complete(attempt.worker, params)

        try:
            shaped = self.calls.run(Call(pool=self.resolved.pool, route=route, send=send))
        except AllFailed as e:
            raise ProviderError(f"no worker could give the answer as JSON: {e}") from e
        choices = shaped.value.body.get("choices") or [{}]
        return str((choices[0].get("message") or {}).get("content") or "")


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _last_user(messages: Sequence[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))


def context(messages: Sequence[dict[str, Any]]) -> list[Message]:
    """Earlier client messages; the client's own tool calls become text (its tools are not fugu's)."""
    out: list[Message] = []
    for m in messages:
        role, text = m.get("role"), text_of(m.get("content"))
        if role in ("system", "developer"):
            out.append(Message(role="system", content=f"Instructions from the API client:\n{text}"))
        elif role == "user":
            out.append(Message(role="user", content=text))
        elif role == "assistant":
            calls = [c.get("function", {}) for c in m.get("tool_calls") or () if isinstance(c, dict)]
            said = [f"[called {c.get('name')}({c.get('arguments', '')})]" for c in calls]
            out.append(Message(role="assistant", content="\n".join([text, *said]).strip()))
        else:
            who = m.get("name") or m.get("tool_call_id") or "tool"
            out.append(Message(role="user", content=f"Result of the client's {who}:\n{text}"))
    return out
