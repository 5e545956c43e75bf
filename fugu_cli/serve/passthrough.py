"""Model `fugu`, the router-only pass-through: for each call of a client's own agent loop the router reads the
request's messages and picks a worker; the request (its tools and parameters) goes to that worker unchanged,
through the worker-call service like every agent step (retries, the first-byte limit, failover, workers
cooling down after failing); each call is a step in the ledger (route decision, usage, cost, a row for every
failed attempt) of a session found by the client's session header or by the conversation's prefix.

Blocking code, run in worker threads, except `acomplete` and `astream`: a whole reply or a stream from
OpenAI-compatible workers routed by the prior, served from the event loop, its rows written in one transaction
once the reply is sent (`Held`). Never prints.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

from fugu_cli.app import Resolved
from fugu_cli.calls import Answer, Call, Exclusions
from fugu_cli.errors import ProviderError
from fugu_cli.ledger import Ledger, StepRecord, TurnLedger
from fugu_cli.llm.capability import fit
from fugu_cli.llm.forward import AsyncForwardStream, Forwarded, Forwarder, ForwardStream
from fugu_cli.llm.parse import StreamAssembler
from fugu_cli.router import Router
from fugu_cli.router.prior import PriorRouter
from fugu_cli.serve.conversation import Conversations, chain
from fugu_cli.serve.params import ROLE_ALIASES, ChatRequest, text_of
from fugu_cli.serve.wire import ApiError
from fugu_cli.store import Store, new_session_id
from fugu_cli.types import Message, RouteDecision, RouteState, ToolCall, Usage, Worker

T = TypeVar("T")

log = logging.getLogger("fugu")

MAX_SESSIONS = 10_000


@dataclass
class PassSession:
    """One client conversation as fugu records it: its id and how many calls each of its turns made."""

    id: str
    last_worker: str | None = None
    steps: dict[int, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_step(self, turn: int) -> int:
        with self.lock:
            self.steps[turn] = self.steps.get(turn, 0) + 1
            return self.steps[turn]


class Held:
    """The rows of one call served from the event loop, kept until its reply is sent and then written in
    one transaction (`flush`): the client does not wait for them, and one commit replaces three or more.
    Flushed before the event loop reads another request (nothing in between yields to it), so the next
    call of the same conversation finds them; another process reading the store may find them a moment
    after the reply. A failure to write is logged: the reply is gone by then."""

    def __init__(self, store: Store, written: Callable[[], None]) -> None:
        self.store = store
        self._writes: list[Callable[[], object]] = []
        self._written: Callable[[], None] | None = written

    def add(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """Keep a write; once flushed, write it now (a stream's last row when its client left early)."""
        self._writes.append(functools.partial(write, *args, **kwargs))
        if self._written is None:
            self._write()

    def flush(self) -> None:
        """Write the rows kept so far (the first call ends the holding)."""
        try:
            self._write()
        finally:
            written, self._written = self._written, None
            if written is not None:
                written()

    def _write(self) -> None:
        writes, self._writes = self._writes, []
        try:
            if writes:
                self.store.batch(writes)
        except Exception as e:
            log.warning("the ledger rows of a pass-through call were not written", exc_info=e)


class _Now:
    """Writes made at once: the worker-thread path's, where the reply waits for its rows."""

    def add(self, write: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        write(*args, **kwargs)


Writes = Held | _Now
NOW = _Now()


@dataclass(frozen=True)
class _Turn(TurnLedger):
    """A turn's ledger whose route and step rows go through `writes` (held, or made at once)."""

    writes: Writes

    def route(self, step: int, decision: RouteDecision) -> None:
        self.writes.add(self._store.add_route, self._sid, self._scope, self.turn, step, decision)

    def step(self, record: StepRecord) -> None:
        self.writes.add(self._store.add_step, self._sid, self._scope, self.turn, record)


@dataclass(frozen=True)
class Routed:
    """One routed call: where it went, for which session, the workers that failed before it and those that
    were cooling down (skipped)."""

    session: PassSession
    decision: RouteDecision
    worker: Worker
    turn: int
    step: int
    started: float
    failed: tuple[str, ...] = ()
    cooling: tuple[tuple[str, float], ...] = ()  # (worker, seconds until it is probed again)
    dropped: tuple[str, ...] = ()  # what fugu could not honour for this worker (request notes included)

    def fugu(self, usage: Usage | None = None) -> dict[str, Any]:
        d = self.decision
        out: dict[str, Any] = {"session_id": self.session.id, "worker": d.worker, "model": self.worker.model}
        out |= {"source": d.source, "p": round(float(d.scores.get(d.worker, 0.0)), 6)}
        out |= {"scores": {k: round(float(v), 6) for k, v in d.scores.items()}}
        out["latency_ms"] = round(d.latency_ms, 3)
        if self.failed:
            out["failed"] = list(self.failed)
        if self.cooling:
            out["cooling"] = {name: {"retry_in_s": round(left, 1)} for name, left in self.cooling}
        if self.dropped:
            out["dropped"] = list(self.dropped)
        if usage is not None:
            out["cost_usd"] = round(usage.cost_usd, 8)
        return out


class PassThrough:
    def __init__(self, resolved: Resolved, store: Store, forwarder: Forwarder, root: Path) -> None:
        self.resolved = resolved
        self.store = store
        self.forwarder = forwarder
        self.root = root
        self.router: Router = resolved.routers.make()
        self._fallback = PriorRouter()
        self.calls = resolved.worker_call()
        self._sessions: OrderedDict[str, PassSession] = OrderedDict()
        self._table = threading.Lock()
        self.conversations = Conversations()
        self._pool_json = json.dumps([dataclasses.asdict(w) for w in resolved.pool])
        self.served_in_loop = (
            0  # calls served from the event loop (`acomplete`, `astream`): diagnostics, tests
        )
        self.unwritten = 0  # of those, the calls whose rows are not written yet (`Held`); changed in the loop

    # sessions

    def session_for(self, req: ChatRequest, digests: Sequence[bytes], writes: Writes = NOW) -> PassSession:
        """The session the client named (a server-issued id), else the one whose conversation this request
        continues (`digests`: its messages' `chain`), else a new one (its row through `writes`)."""
        if req.session:
            return self._named(req.session)
        found = self.conversations.find(digests)
        with self._table:
            session = self._sessions.get(found[0]) if found else None
        if session is not None:
            return session
        sid = new_session_id()
        title = next((text_of(m.get("content")) for m in req.messages if m.get("role") == "user"), "")
        title = title.strip().splitlines()[0][:80] if title.strip() else ""
        writes.add(
            self.store.create_session,
            sid,
            str(self.root),
            "pass",
            self._pool_json,
            self.router.name,
            title=title,
        )
        return self._keep(PassSession(sid))

    def _named(self, sid: str) -> PassSession:
        with self._table:
            session = self._sessions.get(sid)
        if session is not None:
            return session
        row = self.store.get_session(sid)
        if row is None or row.mode != "pass" or row.cwd != str(self.root):
            raise ApiError(
                404,
                f"no pass-through session {sid} on this server: send an id fugu issued (the X-Fugu-Session "
                "header of an earlier reply), or none to start one",
                code="session_not_found",
                param="session_id",
            )
        session = PassSession(sid)
        for step in Ledger(self.store, sid).steps():
            session.steps[step.turn] = max(session.steps.get(step.turn, 0), step.step)
        return self._keep(session)

    def _keep(self, session: PassSession) -> PassSession:
        with self._table:
            self._sessions[session.id] = session
            self._sessions.move_to_end(session.id)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session

    # calls

    def complete(self, req: ChatRequest, cancel: threading.Event) -> dict[str, Any]:
        """The worker's chat.completion, with the client's model name and a `fugu` field."""
        digests = chain(req.messages)
        session = self.session_for(req, digests)
        send = self.forwarder.complete
        call, reply = self._failover(req, session, cancel, lambda w, params: send(w, params, cancel))
        return self._completed(req, digests, call, reply)

    def in_loop(self, req: ChatRequest) -> bool:
        """Whether `acomplete` (a whole reply) or `astream` may serve this request from the event loop:
        every worker reached directly, and a router whose decision costs microseconds (the prior's; a
        learned router reads the transcript with a transformer, milliseconds of CPU, in a worker thread)."""
        if self.router.name != PriorRouter.name:  # serve's batching wrapper carries its router's name
            return False
        if req.stream:
            return self.forwarder.streams_in_loop(self.resolved.pool)
        return self.forwarder.in_loop(self.resolved.pool, req.params)

    def held(self) -> Held:
        """Where a call served from the event loop keeps its rows until its reply is sent."""
        self.unwritten += 1
        return Held(self.store, self._written)

    def _written(self) -> None:
        self.unwritten -= 1

    async def acomplete(self, req: ChatRequest, cancel: threading.Event, held: Held) -> dict[str, Any]:
        """`complete` in the event loop, for the requests `in_loop` accepts: the same routing, retries,
        failover, rows and reply; the rows wait in `held`, which the caller flushes once the reply is sent
        (or once this raised). Its blocking part (the prior's decision) is short."""
        self.served_in_loop += 1
        digests = chain(req.messages)
        session = self.session_for(req, digests, held)
        send = self.forwarder.acomplete
        call, routed = self._call(req, session, cancel, lambda w, params: send(w, params, cancel), held)
        answer = await self.calls.arun(call)
        return self._completed(req, digests, routed(answer), answer.value, held)

    async def astream(
        self, req: ChatRequest, cancel: threading.Event, held: Held
    ) -> tuple[Routed, AsyncIterator[dict[str, Any]]]:
        """`stream` in the event loop, for the requests `in_loop` accepts: the stream opened (failing over
        until a worker sent its first chunk), then its chunks as they come. The rows wait in `held`: the
        caller flushes it once the relay ended (the relay's own last row, when it is closed after that,
        is written then)."""
        self.served_in_loop += 1
        digests = chain(req.messages)
        session = self.session_for(req, digests, held)
        send = self.forwarder.astream
        call, routed = self._call(req, session, cancel, lambda w, params: send(w, params, cancel), held)
        answer = await self.calls.arun(call)
        relayed = routed(answer)
        return relayed, self._arelay(digests, relayed, answer.value, held)

    async def _arelay(
        self, digests: Sequence[bytes], call: Routed, opened: AsyncForwardStream, held: Held
    ) -> AsyncIterator[dict[str, Any]]:
        """`_relay` from the event loop."""
        assembler = StreamAssembler(call.worker.name)
        status = "interrupted"
        last: dict[str, Any] = {}
        try:
            async for chunk in opened:
                if len(chunk["choices"]) == 1:
                    assembler.add(chunk)
                last = chunk
                yield chunk
            status = "ok"
            yield self._usage_chunk(call, opened.usage_json, opened.usage, last)
        except ProviderError:
            status = "provider_error"
            raise
        finally:
            await opened.aclose()
            self._relayed(digests, call, opened.usage, status, assembler, held)

    @staticmethod
    def _usage_chunk(
        call: Routed, usage_json: dict[str, Any] | None, usage: Usage, last: dict[str, Any]
    ) -> dict[str, Any]:
        """The stream's last chunk: no choices, the usage, fugu's field with the cost."""
        usage_json = usage_json or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        head = {k: last.get(k) for k in ("id", "object", "created", "model") if k in last}
        return head | {"choices": [], "usage": usage_json, "fugu": call.fugu(usage)}

    def _relayed(
        self,
        digests: Sequence[bytes],
        call: Routed,
        usage: Usage,
        status: str,
        assembler: StreamAssembler,
        writes: Writes = NOW,
    ) -> None:
        """A relayed stream ended (`status`): its step row, and the conversation remembered if whole."""
        message = _assembled(assembler)
        self._record(call, usage, status, _summary(message), writes)
        if status == "ok" and assembler.chunks:
            self._learn(digests, call.session, message)

    def _completed(
        self,
        req: ChatRequest,
        digests: Sequence[bytes],
        call: Routed,
        reply: Forwarded,
        writes: Writes = NOW,
    ) -> dict[str, Any]:
        choices = reply.body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        self._record(call, reply.usage, "ok", _summary(message), writes)
        if len(choices) == 1:
            self._learn(digests, call.session, message)
        return reply.body | {"model": req.model, "fugu": call.fugu(reply.usage)}

    def stream(self, req: ChatRequest, cancel: threading.Event) -> tuple[Routed, Iterator[dict[str, Any]]]:
        """Opens the stream (failing over until a worker sends its first chunk): the call and its chunks."""
        digests = chain(req.messages)
        session = self.session_for(req, digests)
        send = self.forwarder.stream
        call, opened = self._failover(req, session, cancel, lambda w, params: send(w, params, cancel))
        return call, self._relay(digests, call, opened)

    def _failover(
        self,
        req: ChatRequest,
        session: PassSession,
        cancel: threading.Event,
        send: Callable[[Worker, dict[str, Any]], T],
    ) -> tuple[Routed, T]:
        """Route and `send` (the request's parameters with the optional ones this worker takes) through the
        worker-call service until a worker answers (raises `AllFailed` once none is left); every failed
        attempt is a ledger row of this step."""
        call, routed = self._call(req, session, cancel, send)
        answer = self.calls.run(call)
        return routed(answer), answer.value

    def _call(
        self,
        req: ChatRequest,
        session: PassSession,
        cancel: threading.Event,
        send: Callable[[Worker, dict[str, Any]], T],
        writes: Writes = NOW,
    ) -> tuple[Call[T], Callable[[Answer[Any]], Routed]]:
        """The worker-call service's call for this request (its rows through `writes`), and what makes its
        answer a `Routed` call."""
        self._check_worker(req)
        turn = max(1, sum(1 for m in req.messages if m.get("role") == "user"))
        step = session.next_step(turn)
        cooling = {n: c.left_s(time.time()) for n, c in self.calls.health.cooling(self.resolved.pool).items()}
        call = Call(
            pool=self.resolved.pool,
            route=lambda ex: self._route(req, session, step, ex),
            send=lambda attempt: send(attempt.worker, self._params(req, attempt.worker)),
            ledger=_Turn(Ledger(self.store, session.id), turn, writes),
            step=step,
            cancel=cancel,
        )

        def routed(answer: Answer[Any]) -> Routed:
            worker = answer.worker
            skipped = tuple((n, left) for n, left in cooling.items() if n != worker.name)
            left_out = fit(worker, req.optional)[1]
            dropped = (*req.notes, *(f"{p}: {worker.name} does not take it" for p in left_out))
            return Routed(
                session, answer.decision, worker, turn, step, answer.started, answer.failed, skipped, dropped
            )

        return call, routed

    @staticmethod
    def _params(req: ChatRequest, worker: Worker) -> dict[str, Any]:
        """The request's parameters with the optional ones this worker takes."""
        return req.params | fit(worker, req.optional)[0]

    def _relay(
        self, digests: Sequence[bytes], call: Routed, opened: ForwardStream
    ) -> Iterator[dict[str, Any]]:
        """The worker's chunks, then one usage chunk (no choices) with fugu's cost; recorded at the end."""
        assembler = StreamAssembler(call.worker.name)
        status = "interrupted"
        last: dict[str, Any] = {}
        try:
            for chunk in opened:
                if len(chunk["choices"]) == 1:
                    assembler.add(chunk)
                last = chunk
                yield chunk
            status = "ok"
            yield self._usage_chunk(call, opened.usage_json, opened.usage, last)
        except ProviderError:
            status = "provider_error"
            raise
        finally:
            opened.close()
            self._relayed(digests, call, opened.usage, status, assembler)

    def _check_worker(self, req: ChatRequest) -> None:
        names = [w.name for w in self.resolved.pool]
        if req.worker is not None and req.worker not in names:
            raise ApiError(
                404,
                f"The model fugu/{req.worker} does not exist: usable workers are "
                + ", ".join(f"fugu/{n}" for n in names),
                code="model_not_found",
                param="model",
            )

    def _route(self, req: ChatRequest, session: PassSession, step: int, ex: Exclusions) -> RouteDecision:
        pool = self.resolved.pool
        if all(w.name in ex.names for w in pool) or (req.worker is not None and req.worker in ex.names):
            raise LookupError("no worker left")
        state = RouteState(
            messages=Transcript(req.messages),
            step=step,
            last_worker=session.last_worker,
            excluded=ex.names,
            failover=ex.failover,
        )
        decision = self._pick(state, pool)
        if req.worker is not None:
            return dataclasses.replace(decision, worker=req.worker, source="override", reason="fugu/<worker>")
        if ex.failover:
            return dataclasses.replace(
                decision, source="fallback", reason=f"{', '.join(sorted(ex.failed))} failed"
            )
        return decision

    def _pick(self, state: RouteState, pool: Sequence[Worker]) -> RouteDecision:
        try:
            return self.router.pick(state, pool)
        except LookupError:
            raise
        except Exception as e:  # a broken router must not fail the call: the prior takes over
            log.warning("router failed", exc_info=e)
            return self._fallback.pick(state, pool)

    def _record(self, call: Routed, usage: Usage, status: str, text: str, writes: Writes = NOW) -> None:
        """The step's answered attempt (the route and the failed attempts are already recorded), its rows
        through `writes`."""
        turn = _Turn(Ledger(self.store, call.session.id), call.turn, writes)
        turn.step(StepRecord(call.step, call.decision, status, usage, text[:2000], call.started))
        for dropped in call.dropped:
            writes.add(self.store.add_note, call.session.id, call.turn, call.step, dropped)
        if status == "ok":
            call.session.last_worker = call.worker.name

    def _learn(self, digests: Sequence[bytes], session: PassSession, reply: dict[str, Any]) -> None:
        """Remember this conversation (`digests`: its messages' `chain`), and its continuation with this
        reply, as the session's."""
        self.conversations.remember(digests[-1], session.id)
        self.conversations.remember(chain([reply], digests[-1])[-1], session.id)


class Transcript(Sequence[Message]):
    """The request's messages as the router reads them, each made when first read: the prior reads only as
    far as the first user message (a client resends the whole conversation each call); a learned router
    reads them all."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self._raw = messages
        self._made: list[Message | None] = [None] * len(messages)

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, i: int) -> Message: ...
    @overload
    def __getitem__(self, i: slice) -> list[Message]: ...
    def __getitem__(self, i: int | slice) -> Message | list[Message]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        made = self._made[i]
        if made is None:
            made = self._made[i] = _message(self._raw[i])
        return made


def _message(m: dict[str, Any]) -> Message:
    role = ROLE_ALIASES.get(str(m.get("role")), m.get("role"))
    calls = tuple(
        ToolCall(str(c.get("id") or ""), str(fn.get("name") or ""), _arguments(fn.get("arguments")))
        for c in m.get("tool_calls") or ()
        if isinstance(c, dict) and isinstance(fn := c.get("function") or {}, dict)
    )
    try:
        content = text_of(m.get("content"))
    except ApiError:
        content = ""
    return Message(role=role, content=content, tool_calls=calls, tool_call_id=m.get("tool_call_id"))  # type: ignore[arg-type]


def _arguments(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw)


def _assembled(assembler: StreamAssembler) -> dict[str, Any]:
    if not assembler.chunks:
        return {"role": "assistant", "content": None}
    return assembler.result().message.to_openai()


def _summary(message: dict[str, Any]) -> str:
    text = str(message.get("content") or "")
    calls = [f"{(c.get('function') or {}).get('name')}()" for c in message.get("tool_calls") or ()]
    return (text + (f" [calls: {' '.join(calls)}]" if calls else "")).strip()
