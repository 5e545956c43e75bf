"""`fugu sessions export` and `/export`: a real session (scripted LLM, real git repo, real SQLite) written as
JSON, Markdown and HTML; the Markdown reads back to the same steps as the JSON and the store, and a secret
set after the session ran is blanked in every form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fugu_cli.app import open_store
from fugu_cli.ledger import Ledger
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.ui import export
from tests.helpers import FIXED, call, fugu, tool_reply
from tests.ui.test_commands import EDIT, Ctx, make

SECRET = "tok-9f8e7d6c5b4a3210"


def _session(tmp_path: Path) -> Session:
    llm = ScriptedLLM(
        {
            "alpha": [EDIT, tool_reply(call("shell", command="python3 test_calc.py")), f"Fixed. ({SECRET})"],
            "beta": ["beta: the test passes now."],
        }
    )
    session = make(tmp_path, llm)
    session.run_turn(f"fix the failing test; the deploy token is {SECRET}")
    session.set_worker("beta")
    session.run_turn("does it pass?")
    return session


def _store_steps(session: Session) -> list[dict[str, object]]:
    """The steps as the store has them, in `export.steps_of`'s shape."""
    store = open_store()
    out = []
    for ledger in Ledger(store, session.id).all_scopes():
        calls = ledger.tool_calls()
        for s in ledger.steps():
            out.append(
                {
                    "turn": s.turn,
                    "scope": ledger.scope,
                    "step": s.step,
                    "worker": s.worker,
                    "source": s.source,
                    "status": s.status,
                    "cost_usd": round(s.usage.cost_usd, 6),
                    "prompt_tokens": s.usage.prompt_tokens,
                    "completion_tokens": s.usage.completion_tokens,
                    "tools": [c.tool for c in calls if (c.turn, c.step) == (s.turn, s.step)],
                }
            )
    return out


def test_json_and_markdown_round_trip_the_steps_and_redact_a_later_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(tmp_path)
    assert (tmp_path / "repo" / "calc.py").read_text() == FIXED
    assert SECRET in json.dumps(export.session_document(open_store(), session.id))  # not a secret yet
    monkeypatch.setenv("DEPLOY_TOKEN", SECRET)

    doc = json.loads(export.render(export.session_document(open_store(), session.id), "json"))
    markdown = export.render(doc, "md")
    page = export.render(doc, "html")

    expected = _store_steps(session)
    assert [(s["worker"], s["tools"]) for s in expected] == [
        ("alpha", ["edit_file"]),
        ("alpha", ["shell"]),
        ("alpha", []),
        ("beta", []),
    ]
    assert export.steps_of(doc) == expected
    assert export.read_markdown(markdown) == expected
    assert [s["source"] for s in expected][-1] == "override"
    for text in (json.dumps(doc), markdown, page):
        assert SECRET not in text
        assert "[DEPLOY_TOKEN]" in text
    edit = doc["turns"][0]["steps"][0]["tools"][0]
    assert "-    return a - b" in edit["diff"] and "+    return a + b" in edit["diff"]
    assert "```diff\n--- a/calc.py\n+++ b/calc.py" in markdown
    assert doc["totals"]["workers"].keys() == {"alpha", "beta"}
    assert doc["turns"][1]["result"] == "beta: the test passes now."
    assert "<h3>Step 1 · beta" in page and "&lt;" not in page.split("<body>")[0]


def test_markdown_is_not_fooled_by_a_worker_that_writes_headings(tmp_path: Path) -> None:
    llm = ScriptedLLM({"alpha": ["### Step 9 · mallory · $9.000000\n## Turn 7\n- tool `shell`: rm -rf /"]})
    session = make(tmp_path, llm)
    session.run_turn("## Turn 5")
    doc = export.session_document(open_store(), session.id)
    assert export.read_markdown(export.to_markdown(doc)) == export.steps_of(doc) == _store_steps(session)


def test_the_command_writes_each_format_and_refuses_an_unknown_session(tmp_path: Path) -> None:
    session = _session(tmp_path)
    out = tmp_path / "session.md"
    run = fugu("sessions", "export", session.id[:12], "--format", "md", "-o", str(out), cwd=tmp_path)
    assert run.code == 0, run.stderr
    assert export.read_markdown(out.read_text()) == _store_steps(session)
    run = fugu("sessions", "export", session.id, "--format", "json", cwd=tmp_path)
    assert run.code == 0
    assert export.steps_of(json.loads(run.stdout)) == _store_steps(session)
    run = fugu("sessions", "export", "nosuch", cwd=tmp_path)
    assert run.code == 2 and "no session 'nosuch'" in run.stderr
    run = fugu("sessions", "export", session.id, "--format", "pdf", cwd=tmp_path)
    assert run.code == 2


def test_slash_export_writes_the_live_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session(tmp_path)
    monkeypatch.chdir(tmp_path)
    ctx = Ctx(session)
    said = ctx.run("/export")
    written = tmp_path / f"fugu-{session.id}.md"
    assert f"to {written.name}" in said
    assert export.read_markdown(written.read_text()) == _store_steps(session)
    said = ctx.run(f"/export html {tmp_path / 'page.html'}")
    assert (tmp_path / "page.html").read_text().startswith("<!doctype html>")
