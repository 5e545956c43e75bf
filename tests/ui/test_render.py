"""The renderer on a fixed-width string console: route lines, tool lines, diffs, answers, summary."""

from __future__ import annotations

import io

from rich.console import Console

from fugu_cli.events import (
    AssistantMessage,
    Notice,
    ProviderFailed,
    RouteChosen,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from fugu_cli.tools import ApprovalRequest
from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, TurnResult, Usage, WorkerUsage
from fugu_cli.ui.phrases import tool_summary
from fugu_cli.ui.render import Renderer, approval_text, diff_text, transcript_text

DIFF = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
)


def console(width: int = 80, *, color: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    if color:
        return Console(
            file=out, width=width, force_terminal=True, color_system="standard", no_color=False
        ), out
    return Console(file=out, width=width, force_terminal=False), out


def decision(
    worker: str = "alpha", p: float = 0.61, source: str = "prior", reason: str = ""
) -> RouteDecision:
    other = "beta" if worker == "alpha" else "alpha"
    return RouteDecision(worker, {worker: p, other: 1 - p}, source, 18.4, reason=reason)  # type: ignore[arg-type]


def turn_events() -> list[object]:
    edit = ToolCall("c1", "edit_file", '{"path": "calc.py", "old_text": "a - b", "new_text": "a + b"}')
    shell = ToolCall("c2", "shell", '{"command": "python3 test_calc.py"}')
    result = TurnResult(
        "success",
        "# Done\n\nFixed **add**.",
        "s1",
        2,
        Usage(1000, 234, 0, 0.0123),
        {"alpha": WorkerUsage(1, 0.01), "beta": WorkerUsage(1, 0.0023)},
    )
    return [
        RouteChosen(session_id="s1", step=1, decision=decision()),
        StepStarted(session_id="s1", step=1, worker="alpha"),
        AssistantMessage(
            session_id="s1",
            step=1,
            message=Message("assistant", "Let me fix it.", (edit, shell), worker="alpha"),
        ),
        ToolStarted(session_id="s1", step=1, worker="alpha", call=edit),
        ToolFinished(
            session_id="s1",
            step=1,
            worker="alpha",
            call=edit,
            result=ToolResult("c1", "edit_file", "Edited calc.py (+1 -1).\n" + DIFF),
        ),
        ToolFinished(
            session_id="s1",
            step=1,
            worker="alpha",
            call=shell,
            result=ToolResult("c2", "shell", "Traceback...\nboom", exit_code=1, duration_ms=2500),
        ),
        StepFinished(session_id="s1", step=1, worker="alpha", usage=Usage(600, 100, 0, 0.01)),
        RouteChosen(
            session_id="s1", step=2, decision=decision("beta", 0.7, "override", "forced by the user")
        ),
        StepStarted(session_id="s1", step=2, worker="beta"),
        TextDelta(session_id="s1", worker="beta", text="Fixed"),
        AssistantMessage(
            session_id="s1", step=2, message=Message("assistant", "# Done\n\nFixed **add**.", worker="beta")
        ),
        StepFinished(session_id="s1", step=2, worker="beta", usage=Usage(400, 134, 0, 0.0023)),
        TurnFinished(session_id="s1", result=result),
    ]


def render(events: list[object], width: int = 80) -> str:
    con, out = console(width)
    r = Renderer(con)
    for e in events:
        r.on_event(e)  # type: ignore[arg-type]
    r.close()
    return out.getvalue()


def test_a_turn_shows_who_did_each_step_why_and_what_it_cost() -> None:
    text = render(turn_events())
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[0] == "↳ alpha (p=0.61, 18 ms, prior)"
    assert "Let me fix it." in text
    assert "  alpha ▸ edit calc.py  ✓ (+1 -1)" in lines
    assert "    -    return a - b" in lines and "    +    return a + b" in lines
    assert "  alpha ▸ $ python3 test_calc.py  exit 1 2.5s" in lines
    assert "  ╰ alpha · 700 tokens · $0.0100" in lines
    assert "↳ beta (p=0.70, 18 ms, override) · forced by the user" in lines
    assert "Done" in text and "Fixed add." in text and "**" not in text  # markdown, not raw
    assert lines[-1] == "── 2 steps · alpha ×1, beta ×1 · 1,234 tokens · $0.0123"
    assert "is thinking" not in text  # no spinner on a non-terminal console


def test_failures_denials_and_notices_are_visible() -> None:
    call = ToolCall("c1", "shell", '{"command": "rm -rf build"}')
    denied = ToolResult("c1", "shell", "Permission denied: the user declined", is_error=True, denied=True)
    interrupted = TurnResult(
        "interrupted", "interrupted by the user", "s1", 1, Usage(), {"alpha": WorkerUsage(1, 0)}
    )
    text = render(
        [
            ProviderFailed(session_id="s1", step=1, worker="alpha", error="loopback fault 500"),
            ToolFinished(session_id="s1", step=1, worker="beta", call=call, result=denied),
            Notice(session_id="s1", level="error", text="interrupted by the user"),
            Notice(session_id="s1", level="info", text="not shown"),
            TurnFinished(session_id="s1", result=interrupted),
        ]
    )
    assert "✗ alpha failed: loopback fault 500" in text
    assert "  beta ▸ $ rm -rf build  denied" in text
    assert "! interrupted by the user" in text
    assert "not shown" not in text
    assert text.splitlines()[-1].endswith("· interrupted")


def test_a_role_based_router_names_the_role() -> None:
    d = RouteDecision("alpha", {"alpha": 0.9}, "learned", 3.2, role="verifier")
    assert (
        render([RouteChosen(session_id="s1", step=1, decision=d)])
        == "↳ alpha (p=0.90, 3 ms, learned, verifier)\n"
    )


def test_narrow_console_cuts_long_lines_instead_of_breaking_them() -> None:
    long = decision(reason="description match 0.93 with a very long explanation that goes on and on")
    text = render([RouteChosen(session_id="s1", step=1, decision=long)], width=40)
    assert text.splitlines() == ["↳ alpha (p=0.61, 18 ms, prior) · descri…"]


def test_colour_only_on_a_colour_terminal() -> None:
    con, out = console(color=True)
    con.print(diff_text(DIFF))
    assert "\x1b[32m" in out.getvalue() and "\x1b[31m" in out.getvalue()  # + green, - red
    plain = render(turn_events())
    assert "\x1b[" not in plain


def test_long_diffs_are_cut_with_a_pointer_to_diff() -> None:
    body = "".join(f"+line {i}\n" for i in range(100))
    con, out = console()
    con.print(diff_text("@@ -0,0 +1,100 @@\n" + body, limit=10), end="")
    lines = out.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1] == "    … 91 more lines (/diff shows everything)"


def test_approval_shows_a_preview_then_the_full_diff() -> None:
    body = "".join(f"+line {i}\n" for i in range(30))
    req = ApprovalRequest(
        "beta", "write_file", "edit", "write notes.txt (+30 -0)", "@@ -0,0 +1,30 @@\n" + body, "edit"
    )
    con, out = console()
    con.print(approval_text(req, False), end="")
    short = out.getvalue()
    con2, out2 = console()
    con2.print(approval_text(req, True), end="")
    assert short.startswith("? beta wants to write notes.txt (+30 -0)")
    assert "+line 29" not in short and "more lines" in short
    assert "+line 29" in out2.getvalue()
    shell = ApprovalRequest(
        "alpha", "shell", "exec", "shell: pytest -q", "pytest -q && rm -rf /tmp/x", "shell:pytest"
    )
    con3, out3 = console()
    con3.print(approval_text(shell, False), end="")
    assert out3.getvalue().startswith("? alpha wants to run $ pytest -q\n")
    assert "pytest -q && rm -rf /tmp/x" in out3.getvalue()


def test_tool_summaries() -> None:
    assert tool_summary("shell", '{"command": "ls"}') == "$ ls"
    assert tool_summary("read_file", '{"path": "a.py"}') == "read a.py"
    assert tool_summary("grep", '{"pattern": "TODO"}') == "grep TODO"
    assert tool_summary("glob", '{"pattern": "*.py"}') == "glob *.py"
    assert tool_summary("git_status", "not json") == "git_status"


def test_resumed_transcript_shows_the_last_exchanges() -> None:
    call = ToolCall("c1", "read_file", '{"path": "calc.py"}')
    messages = [
        Message("system", "sys"),
        Message("user", "first task"),
        Message("assistant", "first answer", worker="alpha"),
        Message("user", "second task\n\nFiles the user attached:\n<file>"),
        Message("assistant", None, (call,), worker="beta"),
        Message("tool", "content", tool_call_id="c1"),
        Message("assistant", "second answer", worker="beta"),
    ]
    con, out = console()
    for part in transcript_text(messages, turns=1):
        con.print(part)
    assert [line.rstrip() for line in out.getvalue().splitlines()] == [
        "› second task",
        "  beta ▸ read calc.py",
        "↳ beta",
        "second answer",
    ]


def test_a_diff_the_user_approved_is_not_printed_again() -> None:
    edit = ToolCall("c1", "edit_file", '{"path": "calc.py"}')
    done = ToolFinished(
        session_id="s1",
        step=1,
        worker="alpha",
        call=edit,
        result=ToolResult("c1", "edit_file", "Edited calc.py (+1 -1).\n" + DIFF),
    )
    con, out = console()
    r = Renderer(con)
    r.shown(DIFF)
    r.on_event(done)
    assert out.getvalue() == "  alpha ▸ edit calc.py  ✓ (+1 -1)\n"


def test_attempts_and_their_checks_are_shown_in_the_repl_and_in_progress_lines() -> None:
    from fugu_cli.events import AttemptChecked, AttemptStarted
    from fugu_cli.types import AttemptRecord
    from fugu_cli.ui.progress import ProgressLines

    ref = "refs/fugu/checkpoints/s-t1-attempt1-cheap"
    failed = AttemptRecord("cheap", 0.0012, 2, "failed", "check", "pytest -q", 1, ref)
    events = [
        AttemptStarted(session_id="s", attempt=1, worker="cheap", reason="first attempt: prior"),
        AttemptChecked(session_id="s", attempt=1, record=failed, output="1 failed"),
        AttemptStarted(
            session_id="s", attempt=2, worker="strong", reason="escalates after cheap failed the check"
        ),
        AttemptChecked(
            session_id="s",
            attempt=2,
            record=AttemptRecord("strong", 0.03, 1, "passed", "check", "pytest -q", 0),
        ),
    ]
    con, out = console(120)
    renderer = Renderer(con, live=False)
    lines: list[str] = []
    progress = ProgressLines(lines.append)
    for e in events:
        renderer.on_event(e)
        progress.on_event(e)
    shown = out.getvalue().splitlines()
    assert (
        shown
        == lines
        == [
            "◇ attempt 1 · cheap · first attempt: prior",
            f"✗ attempt 1 · cheap · check failed (exit 1) · $0.0012 · set aside as {ref}",
            "◇ attempt 2 · strong · escalates after cheap failed the check",
            "✓ attempt 2 · strong · check passed (exit 0) · $0.0300",
        ]
    )
