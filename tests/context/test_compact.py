"""Compaction on its own: where it cuts (never between a call and its result), what the summary keeps (task,
facts the ledger distils), what the store keeps (everything), and the threshold during an agent run; with a
scripted LLM, a real store and real tools in a real git repo."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.context import ContextPolicy
from fugu_cli.context.compact import SUMMARY_NAME, Compactor, CompactRequest, split
from fugu_cli.events import Compacted, Event, RouteChosen
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.llm.tokens import CharTokens
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import Message, ToolCall, Worker
from tests.helpers import call, tool_reply
from tests.test_agent import deps, prior, task

# the runs below are sized for a 6,000-token window holding 5,630 characters of tool schemas; a window grows
# with the schemas so that the tools fugu offers can change without retuning every size here. That holds for
# a small change only (a threshold at half the window moves half as far), so the runs offer the file, shell
# and git tools they were sized with, not the tools added since (web_fetch, task, todo_write, ...).
_SIZED_WITH = {"read_file", "glob", "grep", "edit_file", "write_file", "shell"}
_SIZED_WITH |= {"git_status", "git_diff", "git_log", "git_commit"}
TOOLS = ToolRegistry.default().filtered(lambda name: name in _SIZED_WITH)
_SCHEMAS = len(json.dumps(TOOLS.schemas()))
_WINDOW = 6000 + (_SCHEMAS - 5630) // 2  # 4 chars a token, doubled: the threshold is at half the window
SMALL = Worker("alpha", "openai/alpha", priority=2, context_limit=_WINDOW, price_in=1.0, price_out=1.0)
CHEAP = Worker("beta", "openai/beta", priority=1, context_limit=_WINDOW, price_in=0.1, price_out=0.1)


def _deps(tmp_path: Path, llm: ScriptedLLM) -> AgentDeps:
    return dataclasses.replace(deps(tmp_path, llm), tools=TOOLS)


def _steps(n: int, calls: int = 2, size: int = 400) -> list[Message]:
    out = [Message("system", "be brief"), Message("user", "the task")]
    for i in range(n):
        ids = [f"c{i}_{j}" for j in range(calls)]
        out.append(Message("assistant", f"step {i}", tuple(ToolCall(c, "shell", "{}") for c in ids)))
        out += [Message("tool", "x" * size, tool_call_id=c, name="shell") for c in ids]
    return out


def test_the_cut_falls_between_steps_and_keeps_the_task_and_the_last_step() -> None:
    messages = _steps(12)
    count = CharTokens().message
    for keep in (0, 50, 250, 333, 900, 10_000):
        parts = split(messages, keep, lambda m: count(SMALL, m))
        assert parts.system == messages[:1] and parts.task == messages[1:2]
        assert parts.tail and parts.tail[0].role == "assistant"
        answered = {t.id for m in parts.tail for t in m.tool_calls}
        assert all(m.tool_call_id in answered for m in parts.tail if m.role == "tool")
        assert parts.tail[-3:] == messages[-3:]
        assert len(parts.system + parts.task + parts.middle + parts.tail) == len(messages)


def test_a_compaction_keeps_facts_and_the_store_keeps_every_message(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            tool_reply(call("shell", command="echo " + "y" * 3000)),
            tool_reply(call("read_file", path="calc.py")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "the summary",
            tool_reply(call("shell", command="true")),
        ]
    )
    d = dataclasses.replace(_deps(tmp_path, llm), workers={SMALL.name: SMALL, CHEAP.name: CHEAP})
    messages = task()
    Agent(d).run(messages, 1, prior, Limits(max_steps=3))
    policy = ContextPolicy(CharTokens())
    compactor = Compactor(llm, d.calls, policy, [SMALL, CHEAP], [], d.ledger, d.tool_ctx.root)
    done = compactor.compact(messages, CompactRequest(SMALL, "user", "the test", turn=1, keep_tokens=0))
    assert done is not None and done.summarizer is not None and done.summarizer.worker == "beta"
    summary = next(m for m in done.messages if m.name == SUMMARY_NAME)
    assert "the summary" in (summary.content or "")
    assert "read calc.py: sha1" in (summary.content or "")
    assert "$ python3 test_calc.py → exit 1" in (summary.content or "")
    assert done.messages[:2] == tuple(messages[:2])  # system prompt and task, verbatim
    assert done.messages[-1] is messages[-1]
    assert "Focus the summary on: the test" in (llm.calls[-1].messages[-1].content or "")
    stored = d.ledger.store.load_messages("s1")
    assert len(stored) == len(messages) - 2  # the agent stored what it appended; nothing was removed
    assert d.ledger.transcript() == list(done.messages)  # what --continue loads
    [row] = d.ledger.compactions()
    assert (row.trigger, row.summarizer, row.focus) == ("user", "beta", "the test")
    compact_steps = d.ledger.sibling("compact").steps()
    assert [(s.worker, s.role) for s in compact_steps] == [("beta", "summarize")]


def test_a_failed_summary_leaves_the_facts(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            tool_reply(call("read_file", path="calc.py")),
            tool_reply(call("shell", command="echo " + "y" * 3000)),
            tool_reply(call("shell", command="true")),
        ]
    )
    d = dataclasses.replace(_deps(tmp_path, llm), workers={SMALL.name: SMALL, CHEAP.name: CHEAP})
    messages = task()
    Agent(d).run(messages, 1, prior, Limits(max_steps=3))
    llm.add({"error": "500"})
    compactor = Compactor(llm, d.calls, ContextPolicy(CharTokens()), [CHEAP], [], d.ledger)
    done = compactor.compact(messages, CompactRequest(CHEAP, "user", turn=1, keep_tokens=0))
    assert done is not None
    text = next(m for m in done.messages if m.name == SUMMARY_NAME).content or ""
    assert "could not be written" in text and "read calc.py: sha1" in text


def test_past_the_threshold_the_agent_compacts_before_the_step(tmp_path: Path) -> None:
    big = "z" * 9000
    llm = ScriptedLLM(
        [tool_reply(call("shell", command=f"echo {big[:3000]}")) for _ in range(4)] + ["S", "finished"]
    )
    workers = {w.name: w for w in (SMALL, CHEAP)}
    d: AgentDeps = dataclasses.replace(
        _deps(tmp_path, llm), workers=workers, context=ContextPolicy(CharTokens(), compact_at=0.5)
    )
    events: list[Event] = []
    messages = task()
    result = Agent(d).run(messages, 1, prior, Limits(max_steps=8), TurnIO(emit=events.append))
    assert result.status == "success"
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert compactions and compactions[0].trigger == "threshold"
    assert compactions[0].tokens_after < compactions[0].tokens_before
    assert result.workers["beta"].steps >= 1  # the summary's cost is in the turn's tally
    policy = ContextPolicy(CharTokens())
    for c in llm.calls:
        assert (
            policy.tokens(workers[c.worker], c.messages, c.tools) <= policy.window(workers[c.worker]).usable
        )
    routes = [e for e in events if isinstance(e, RouteChosen)]
    assert all(r.decision.worker == "alpha" for r in routes)


def test_when_no_worker_can_hold_the_transcript_it_is_compacted_first(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [tool_reply(call("shell", command="echo " + "w" * 3000)) for _ in range(7)] + ["S", "finished"]
    )
    workers = {w.name: w for w in (SMALL, CHEAP)}
    policy = ContextPolicy(CharTokens(), compact_at=1.0)  # the threshold is the window: only masking acts
    d: AgentDeps = dataclasses.replace(_deps(tmp_path, llm), workers=workers, context=policy)
    events: list[Event] = []
    result = Agent(d).run(task(), 1, prior, Limits(max_steps=9), TurnIO(emit=events.append))
    assert result.status == "success" and result.result == "finished"
    compactions = [e for e in events if isinstance(e, Compacted)]
    assert compactions and all(c.trigger == "no-fit" and c.summarizer == "beta" for c in compactions)
    assert all(c.tokens_before > 4500 >= c.tokens_after for c in compactions)  # 4,500: the usable window
    for c in llm.calls:
        assert (
            policy.tokens(workers[c.worker], c.messages, c.tools) <= policy.window(workers[c.worker]).usable
        )
