"""The session with a learned router, in process: real router, tools, git and store; scripted words."""

from __future__ import annotations

import json
from pathlib import Path

from fugu_cli.app import RunOptions, build_session
from fugu_cli.events import Event, RouteChosen
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.router.checkpoint import init_checkpoint
from fugu_cli.types import Worker
from tests.helpers import FIXED, call, make_repo, tool_reply, write_pool

WORKERS = [
    Worker(
        "tester",
        "openai/tester",
        description="Runs the test suite with pytest and reads Python tracebacks and failing assertions.",
    ),
    Worker(
        "writer",
        "openai/writer",
        description="Writes documentation: README files, markdown prose, docstrings and changelogs.",
    ),
]


def test_the_learned_router_switches_workers_as_the_transcript_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    ckpt = tmp_path / "ckpt"
    init_checkpoint(ckpt, WORKERS)
    pool = write_pool(
        tmp_path / "pool.toml",
        [{"name": w.name, "model": w.model, "description": w.description} for w in WORKERS],
    )
    script = ScriptedLLM(
        [
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(
                call("write_file", path="README.md", content="# calc\n\n`add(a, b)` returns the sum.\n")
            ),
            "Fixed add() and documented it in README.md.",
        ]
    )
    opts = RunOptions(cwd=repo, pool=str(pool), router=str(ckpt), permission_mode="full-auto")
    session = build_session(opts, llm=script)
    events: list[Event] = []
    result = session.run_turn(
        "The tests fail after the refactor. Fix them, then document the change in the README.", events.append
    )
    assert result.status == "success"
    assert (repo / "calc.py").read_text() == FIXED and (repo / "README.md").exists()

    routes = [e.decision for e in events if isinstance(e, RouteChosen) and e.decision]
    assert len(routes) == 5 and all(d.source == "learned" for d in routes)
    for d in routes:
        assert set(d.scores) == {"tester", "writer"}
        assert d.worker == max(d.scores, key=lambda n: d.scores[n])
    chosen = [d.worker for d in routes]
    assert len(set(chosen)) == 2, f"the router never switched: {chosen}"
    assert script.workers_called() == chosen

    stored = session.deps.store.query(
        "SELECT step, worker, source, scores_json FROM route_decisions WHERE session_id=? ORDER BY rowid",
        (session.id,),
    )
    assert [r["worker"] for r in stored] == chosen
    assert all(set(json.loads(r["scores_json"])) == {"tester", "writer"} for r in stored)
    calls = session.ledger.tool_calls()
    assert [(c.step, c.agent) for c in calls] == [(i + 1, chosen[i]) for i in range(4)]
