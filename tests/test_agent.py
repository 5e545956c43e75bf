"""The agent loop on its own: steps, tools, failover, limits, cancel and per-run I/O, against a real store,
real tools in a real git repo, and a scripted LLM."""

from __future__ import annotations

import threading
from pathlib import Path

from fugu_cli.agent import Agent, AgentDeps, Limits, TurnIO
from fugu_cli.calls import RetryPolicy, WorkerCall, WorkerHealth
from fugu_cli.events import Event, Notice, ProviderFailed, RouteChosen, StepFinished, ToolFinished
from fugu_cli.ledger import Ledger
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.router.prior import PriorRouter
from fugu_cli.store import Store
from fugu_cli.tools import PermissionPolicy, ToolContext
from fugu_cli.tools.registry import ToolRegistry
from fugu_cli.types import Completion, Message, RouteDecision, RouteState, Worker
from tests.helpers import call, make_repo, tool_reply

POOL = (Worker("alpha", "openai/alpha", priority=2), Worker("beta", "openai/beta", priority=1))


def deps(tmp_path: Path, llm: object, scope: str = "main") -> AgentDeps:
    repo = make_repo(tmp_path / "repo")
    store = Store(tmp_path / "fugu.db")
    store.create_session("s1", str(repo), "fugu", "[]", "prior")
    return AgentDeps(
        llm=llm,  # type: ignore[arg-type]
        calls=WorkerCall(WorkerHealth(), RetryPolicy(max_retries=0)),
        tools=ToolRegistry.default(),
        tool_ctx=ToolContext(root=repo, agent="", policy=PermissionPolicy(mode="full-auto")),
        ledger=Ledger(store, "s1", scope),
        workers={w.name: w for w in POOL},
        session_id="s1",
    )


def prior(state: RouteState) -> RouteDecision:
    return PriorRouter().pick(state, [w for w in POOL if w.name not in state.excluded])


def task() -> list[Message]:
    return [Message("system", "be brief"), Message("user", "fix calc.add")]


def test_a_run_calls_tools_records_every_message_and_attributes_each_call(tmp_path: Path) -> None:
    llm = ScriptedLLM(
        [
            tool_reply(call("read_file", path="calc.py")),
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "Fixed: add now adds.",
        ]
    )
    d = deps(tmp_path, llm)
    events: list[Event] = []
    messages = task()
    result = Agent(d).run(messages, 1, prior, Limits(), TurnIO(emit=events.append))
    assert result.status == "success" and result.result == "Fixed: add now adds."
    assert result.num_turns == 3 and result.workers["alpha"].steps == 3
    assert (d.tool_ctx.root / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    # what the agent appended is in the store, in order, after the two messages it was given
    stored = [m for _, m in d.ledger.store.load_messages("s1")]
    assert [m.role for m in stored] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert stored == messages[2:]
    calls = d.ledger.tool_calls()
    assert [(c.step, c.agent, c.tool, c.is_error) for c in calls] == [
        (1, "alpha", "read_file", False),
        (2, "alpha", "edit_file", False),
    ]
    assert [type(e).__name__ for e in events if isinstance(e, (RouteChosen, StepFinished))] == [
        "RouteChosen",
        "StepFinished",
    ] * 3


def test_a_failed_worker_is_excluded_and_the_step_fails_over(tmp_path: Path) -> None:
    llm = ScriptedLLM({"alpha": [{"error": "500"}], "beta": ["done by beta"]})
    d = deps(tmp_path, llm)
    events: list[Event] = []
    result = Agent(d).run(task(), 1, prior, Limits(), TurnIO(emit=events.append))
    assert result.status == "success" and result.result == "done by beta"
    assert llm.workers_called() == ["alpha", "beta"]
    assert [e.worker for e in events if isinstance(e, ProviderFailed)] == ["alpha"]
    steps = d.ledger.steps()
    assert [(s.step, s.worker, s.status) for s in steps] == [
        (1, "alpha", "provider_error"),
        (1, "beta", "ok"),
    ]


def test_every_worker_failing_ends_the_turn_with_each_cause(tmp_path: Path) -> None:
    llm = ScriptedLLM({"alpha": [{"error": "500"}], "beta": [{"error": "401"}]})
    result = Agent(deps(tmp_path, llm)).run(task(), 1, prior, Limits())
    assert result.status == "error_during_execution"
    assert result.error is not None and "alpha" in result.error and "beta" in result.error


def test_the_step_limit_stops_a_worker_that_keeps_calling_tools(tmp_path: Path) -> None:
    llm = ScriptedLLM([tool_reply(call("git_status"))] * 5)
    result = Agent(deps(tmp_path, llm)).run(task(), 1, prior, Limits(max_steps=2))
    assert (result.status, result.num_turns) == ("error_max_turns", 2)
    assert result.error == "stopped at the step limit (2); raise it with --max-turns"


def test_a_cancel_during_a_step_records_it_as_interrupted(tmp_path: Path) -> None:
    cancel = threading.Event()
    llm = ScriptedLLM([{"content": "slow", "delay_s": 5}])
    d = deps(tmp_path, llm)
    threading.Timer(0.2, cancel.set).start()
    result = Agent(d).run(task(), 1, prior, Limits(), TurnIO(cancel=cancel))
    assert result.status == "interrupted"
    assert [s.status for s in d.ledger.steps()] == ["interrupted"]


class WarningLLM(ScriptedLLM):
    def complete(self, *args: object, **kwargs: object) -> Completion:  # type: ignore[override]
        done = super().complete(*args, **kwargs)  # type: ignore[arg-type]
        return Completion(done.message, done.usage, done.model, done.finish_reason, warnings=("no price",))


def test_a_completions_warning_reaches_the_user_as_a_notice(tmp_path: Path) -> None:
    events: list[Event] = []
    Agent(deps(tmp_path, WarningLLM(["hi"]))).run(task(), 1, prior, Limits(), TurnIO(emit=events.append))
    assert [(e.level, e.text) for e in events if isinstance(e, Notice)] == [("warning", "no price")]


def test_runs_sharing_deps_keep_their_own_events(tmp_path: Path) -> None:
    """AgentDeps is shared (by the session and the conductor): what differs per run travels in TurnIO."""
    llm = ScriptedLLM(
        {"alpha": [tool_reply(call("git_status")), "one"], "beta": [tool_reply(call("git_status")), "two"]}
    )
    d = deps(tmp_path, llm)
    seen: list[list[Event]] = [[], []]

    def run(i: int) -> None:
        name = POOL[i].name

        def fixed(state: RouteState) -> RouteDecision:
            return RouteDecision(name, {name: 1.0}, "override", 0.0)

        Agent(d).run(task(), i + 1, fixed, Limits(), TurnIO(emit=seen[i].append))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, events in enumerate(seen):
        assert [e.worker for e in events if isinstance(e, ToolFinished)] == [POOL[i].name]
        assert [e.worker for e in events if isinstance(e, StepFinished)] == [POOL[i].name] * 2
