"""The words every part of the UI uses for the same things: a tool call, a route decision, a workflow line,
an error line. Plain strings, no rich: the listing commands and the REPL's completer import this cheaply.
"""

from __future__ import annotations

import json
import sys

from fugu_cli.events import (
    AttemptChecked,
    AttemptStarted,
    Event,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
)
from fugu_cli.types import AttemptRecord, RouteDecision


def err(text: str) -> None:
    """One line on stderr, the way every fugu error starts."""
    print(f"fugu: {text}", file=sys.stderr, flush=True)


def tool_summary(name: str, arguments: str, is_error: bool = False, exit_code: int | None = None) -> str:
    """`$ pytest -q`, `edit src/a.py`, `grep TODO`: one short phrase for a tool call."""
    try:
        args = json.loads(arguments or "{}")
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    if name == "shell":
        text = f"$ {str(args.get('command', ''))[:60]}"
    elif name in ("read_file", "write_file", "edit_file"):
        text = f"{name.split('_')[0]} {args.get('path', '?')}"
    elif name in ("glob", "grep"):
        text = f"{name} {args.get('pattern', '')}"
    elif name.startswith("mcp__") and args:
        shown = json.dumps(args, ensure_ascii=False)
        text = f"{name} {shown if len(shown) <= 60 else shown[:57] + '...'}"
    else:
        text = name
    if exit_code:
        text += f" (exit {exit_code})"
    return text + (" ✗" if is_error else "")


def route_reasons(decision: RouteDecision) -> list[str]:
    """`p=0.61`, `18 ms`, `prior` (and the role): why the router chose, in the order the route line shows.
    The probability is left out when the router gave the worker no score (a forced or failover pick)."""
    p = decision.scores.get(decision.worker)
    out = [f"p={p:.2f}"] if p is not None else []
    return [
        *out,
        f"{decision.latency_ms:.0f} ms",
        decision.source,
        *([decision.role] if decision.role else []),
    ]


def workflow_line(event: Event) -> str | None:
    """Ultra mode's progress: the plan, then each step starting and finishing."""
    if isinstance(event, WorkflowPlanned):
        inner = f" for step {event.parent_step}" if event.parent_step is not None else ""
        n = len(event.steps)
        by = f"{event.source}: {event.conductor}" if event.conductor else event.source
        rows = [f"◆ workflow {event.workflow}{inner} ({by}, {n} step{'' if n == 1 else 's'})"]
        for s in event.steps:
            access = f" ← {', '.join(map(str, s['access']))}" if s["access"] else ""
            rows.append(f"  {s['step']}. {s['worker']}{access}: {' '.join(str(s['subtask']).split())[:100]}")
        return "\n".join(rows)
    if isinstance(event, WorkflowStepStarted):
        return f"▸ step {event.step} · {event.worker} started"
    if isinstance(event, WorkflowStepFinished):
        mark = "✓" if event.status == "success" else "✗"
        took = f"{event.elapsed_s:.1f} s · ${event.cost_usd:.4f}"
        return f"{mark} step {event.step} · {event.worker} · {event.status} · {took}"
    return None


def attempt_line(event: Event) -> str | None:
    """An attempt starting (`◇ attempt 2 · strong · escalates after cheap failed the check`) or judged
    (`✗ attempt 1 · cheap · check failed (exit 1) · $0.0012 · set aside as refs/...`)."""
    if isinstance(event, AttemptStarted):
        why = f" · {event.reason}" if event.reason else ""
        return f"◇ attempt {event.attempt} · {event.worker}{why}"
    if isinstance(event, AttemptChecked):
        return f"{'✓' if event.record.passed else '✗'} attempt {event.attempt} · {record_text(event.record)}"
    return None


def record_text(r: AttemptRecord) -> str:
    """`cheap · check failed (exit 1) · $0.0012 · set aside as refs/fugu/...`: an attempt and its evidence."""
    judge = {"check": "check", "worker-test": "own tests"}.get(r.evidence, "evidence")
    code = f" (exit {r.exit_code})" if r.exit_code is not None else ""
    parts = [r.worker, f"{judge} {r.check}{code}", f"${r.cost_usd:.4f}"]
    if r.evidence == "worker-test" and r.command:
        parts.insert(2, f"$ {r.command[:60]}")
    if r.set_aside:
        parts.append(f"set aside as {r.set_aside}")
    return " · ".join(parts)
