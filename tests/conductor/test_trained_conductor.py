"""`[ultra] conductor = "local:PATH"`: a trained conductor (a local model) plans `fugu --ultra`'s workflows;
when its plan does not parse twice, the prompted conductor plans instead and says so; a bad path is a usage
error. The models are tiny ones built here: one taught (by the warm start's supervised fine-tuning) to write
one workflow for one request, one untrained."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from fugu_cli.conductor import lm
from fugu_cli.conductor.tasks import render
from fugu_cli.errors import UsageError
from fugu_cli.events import Event, Notice, WorkflowPlanned
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.ui.phrases import workflow_line
from tests.conductor.kit import pool_for, step_requests, tc
from tests.conductor.test_conductor import open_session
from tests.conductor.tinylm import build, teach
from tests.helpers import FIXED, fugu, make_repo, tool_reply

REQUEST = "fix the failing test"
PLAN = {
    "steps": [
        {"worker": "beta", "subtask": "Find why test_calc.py fails.", "access": []},
        {"worker": "alpha", "subtask": "Fix calc.py using step 0's finding.", "access": [0]},
    ]
}
PROMPT = render(REQUEST, [("alpha", "worker alpha"), ("beta", "worker beta")], allow_conductor=True)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trained-conductor")
    plan = json.dumps(PLAN)
    base = build(root / "base", [PROMPT, plan] * 20, vocab=400)
    taught = Path(shutil.copytree(base, root / "taught"))  # the same seeded model, then taught
    teach(taught, [PROMPT], [plan], steps=80, lr=3e-3)
    policy = lm.load(taught, device="cpu", threads=1)
    assert lm.generate(policy, [PROMPT], max_new_tokens=80)[0].strip() == plan  # what the test relies on
    return {"taught": taught, "untrained": base}


def configure(conductor: str) -> None:
    home = Path(os.environ["FUGU_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[ultra]\nconductor = "{conductor}"\n')


@pytest.mark.timeout(900)
def test_the_trained_conductor_plans_and_the_workflow_runs_end_to_end(
    tmp_path: Path, loopback_factory: object, models: dict[str, Path]
) -> None:
    configure(f"local:{models['taught']}")
    pool, servers = pool_for(tmp_path, loopback_factory, ["alpha", "beta"])  # type: ignore[arg-type]
    repo = make_repo(tmp_path / "repo")
    servers["beta"].script(
        "beta", [tool_reply(tc("b_read", "read_file", path="calc.py")), "BETA-FOUND: add() returns a - b."]
    )
    servers["alpha"].script(
        "alpha",
        [
            tool_reply(tc("a_edit", "edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "ALPHA-DONE: add() adds now.",
        ],
    )
    args = ("--ultra", "-p", REQUEST, "--pool", str(pool), "--permission-mode", "full-auto")
    run = fugu(*args, "--output-format", "stream-json", cwd=repo, timeout=600)
    assert run.code == 0, run.stderr
    assert (repo / "calc.py").read_text() == FIXED
    wf = next(e for e in run.events() if e.get("subtype") == "workflow")
    assert wf["conductor"] == f"trained conductor {models['taught']}"
    assert [s["worker"] for s in wf["steps"]] == ["beta", "alpha"]
    assert not any(
        "You are the conductor" in json.dumps(r.messages) for r in servers["alpha"].requests_for("alpha")
    )
    assert "BETA-FOUND" in step_requests(servers["alpha"], "alpha")[0].messages[1]["content"]
    assert run.events()[-1]["result"] == "ALPHA-DONE: add() adds now."


@pytest.mark.timeout(900)
def test_an_unparseable_trained_plan_falls_back_to_the_prompted_conductor_visibly(
    tmp_path: Path, models: dict[str, Path]
) -> None:
    configure(f"local:{models['untrained']}")
    repo = make_repo(tmp_path / "repo")
    plan = {"steps": [{"worker": "beta", "subtask": "Explain calc.py.", "access": []}]}
    llm = ScriptedLLM({"alpha": [json.dumps(plan)], "beta": ["BETA: calc.py adds badly."]})
    events: list[Event] = []
    result = open_session(tmp_path, repo, llm).run_turn("explain calc.py", events.append)
    assert result.status == "success" and result.result == "BETA: calc.py adds badly."
    (notice,) = [e.text for e in events if isinstance(e, Notice) and e.level == "warning"]
    assert f"the trained conductor {models['untrained']} wrote no valid workflow twice" in notice
    assert "the prompted conductor (alpha) plans instead" in notice
    (planned,) = [e for e in events if isinstance(e, WorkflowPlanned)]
    assert planned.conductor == "prompted conductor alpha"
    assert "(conductor: prompted conductor alpha, 1 step)" in (workflow_line(planned) or "")
    assert [c.worker for c in llm.calls] == ["alpha", "beta"]  # one prompted plan, one step


def test_a_conductor_path_that_is_no_model_folder_is_a_usage_error(tmp_path: Path) -> None:
    configure("local:no/such/model")
    repo = make_repo(tmp_path / "repo")
    with pytest.raises(UsageError, match=r'conductor = "local:no/such/model": .* \(no config.json\)'):
        open_session(tmp_path, repo, ScriptedLLM({}))
