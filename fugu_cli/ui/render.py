"""The renderer: a session's Events as rich output. The REPL's full style shows route lines, tool lines,
diffs, answers and a summary; the compact style (`fugu demo`) shows progress.py's one line per step
(`↳ alpha (p=0.61, 18 ms, prior) · read a.py · $0.0012`), the lines one-shot runs print without rich.

Degrades to plain text for NO_COLOR, narrow or non-tty consoles. Never reads input; the spinner is the only
thing that redraws, and `pause()` stops it before anyone asks a question.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.spinner import Spinner
from rich.text import Text

from fugu_cli.events import (
    AssistantMessage,
    AttemptChecked,
    AttemptStarted,
    Compacted,
    Event,
    Notice,
    ProviderFailed,
    RouteChosen,
    SessionStarted,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    WorkflowAgentEvent,
    WorkflowPlanned,
    WorkflowStepFinished,
    WorkflowStepStarted,
)
from fugu_cli.tools import ApprovalRequest
from fugu_cli.types import Message, RouteDecision, ToolCall, ToolResult, TurnResult, Usage
from fugu_cli.ui.phrases import attempt_line, route_reasons, tool_summary, workflow_line
from fugu_cli.ui.progress import ProgressLines, compacted_line
from fugu_cli.ui.prompt import ATTACHMENTS

DIFF_LINES = 40
STREAM_TAIL = 8
EDIT_TOOLS = ("edit_file", "write_file")


def make_console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that honours NO_COLOR and TERM=dumb, and never wraps below 20 columns."""
    console = Console(stderr=stderr, width=width, highlight=False, soft_wrap=False)
    if console.width < 20:
        console.width = 20
    return console


def route_text(decision: RouteDecision) -> Text:
    """`↳ alpha (p=0.61, 18 ms, prior)`: who takes the step, how sure the router was, how long it took."""
    text = Text("↳ ", style="dim")
    text.append(decision.worker, style="bold cyan")
    text.append(f" ({', '.join(route_reasons(decision))})", style="dim")
    if decision.reason:
        text.append(f" · {decision.reason}", style="dim italic")
    return text


def tool_text(worker: str, call: ToolCall, result: ToolResult, indent: str = "  ") -> Text:
    """`  alpha ▸ $ pytest -q ✓ 0.4s`: the agent, the call, and how it went."""
    text = Text(indent)
    text.append(worker, style="cyan")
    text.append(" ▸ ", style="dim")
    text.append(tool_summary(call.name, call.arguments))
    if result.denied:
        text.append("  denied", style="bold red")
    elif result.is_error:
        first = result.content.strip().splitlines()[0] if result.content.strip() else "failed"
        text.append(f"  ✗ {first[:100]}", style="red")
    else:
        mark = "✓" if result.exit_code in (None, 0) else f"exit {result.exit_code}"
        text.append(f"  {mark}", style="green" if result.exit_code in (None, 0) else "yellow")
        if call.name in EDIT_TOOLS:
            head = result.content.splitlines()[0] if result.content else ""
            counts = head[head.find("(") :] if "(" in head else ""
            if counts:
                text.append(f" {counts.rstrip('.')}", style="dim")
        if result.duration_ms >= 1000:
            text.append(f" {result.duration_ms / 1000:.1f}s", style="dim")
    return text


def diff_text(diff: str, limit: int | None = DIFF_LINES) -> Text:
    """A unified diff with + lines green, - lines red, hunk headers cyan; cut after `limit` lines."""
    lines = diff.rstrip("\n").splitlines()
    shown = lines if limit is None else lines[:limit]
    text = Text()
    for line in shown:
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        text.append("    " + line + "\n", style=style)
    if len(shown) < len(lines):
        text.append(f"    … {len(lines) - len(shown)} more lines (/diff shows everything)\n", style="dim")
    return text


def edit_diff(result: ToolResult) -> str:
    """The diff part of an edit tool's result (its first line is the summary)."""
    _, _, rest = result.content.partition("\n")
    return rest if rest.lstrip().startswith(("---", "@@")) else ""


def usage_text(usage: Usage) -> str:
    tokens = usage.prompt_tokens + usage.completion_tokens
    return f"{tokens:,} tokens · ${usage.cost_usd:.4f}"


def summary_text(result: TurnResult) -> Text:
    """`3 steps · alpha ×2, beta ×1 · 1,234 tokens · $0.0123`, plus the status when it is not success."""
    used = ", ".join(f"{name} ×{w.steps}" for name, w in result.workers.items()) or "no worker"
    steps = f"{result.num_turns} step" + ("" if result.num_turns == 1 else "s")
    text = Text(f"── {steps} · {used} · {usage_text(result.usage)}", style="dim")
    if result.status != "success":
        text.append(f" · {result.status.replace('_', ' ')}", style="yellow")
    return text


def worker_costs(rows: Iterable[tuple[str, Usage]]) -> dict[str, tuple[int, Usage]]:
    """Steps and summed usage per worker, in first-seen order."""
    out: dict[str, tuple[int, Usage]] = {}
    for worker, usage in rows:
        steps, total = out.get(worker, (0, Usage()))
        out[worker] = (steps + 1, total + usage)
    return out


class Renderer:
    """Renders a session's events as they arrive (called from the turn's thread).

    `compact`: one line per step and nothing that redraws (one-shot runs, `fugu demo`); `prefix` tags the
    lines of one ultra-mode step's agent ("  [1] ")."""

    def __init__(
        self, console: Console, *, live: bool | None = None, compact: bool = False, prefix: str = ""
    ) -> None:
        self.console = console
        self.compact = compact
        self.prefix = prefix
        live_ok = (console.is_terminal and not console.is_dumb_terminal) if live is None else live
        self.live_ok = live_ok and not compact
        self._live: Live | None = None
        self._activity = ""
        self._streamed = ""
        self._running: dict[int, str] = {}
        self._shown: set[str] = set()  # diffs the user already saw in an approval question
        self._lock = threading.RLock()
        self._progress = ProgressLines(self._line, prefix) if compact else None

    def on_event(self, event: Event) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.on_event(event)
            else:
                self._handle(event)

    def _line(self, text: str) -> None:
        self.console.print(Text(text), soft_wrap=True)

    def _handle(self, event: Event) -> None:
        if isinstance(event, SessionStarted):
            self._running, self._shown = {}, set()
        elif isinstance(
            event, (WorkflowPlanned, WorkflowStepStarted, WorkflowStepFinished, WorkflowAgentEvent)
        ):
            self._workflow(event)
        elif isinstance(event, AttemptStarted | AttemptChecked):
            self.pause()
            line = attempt_line(event) or ""
            passed = isinstance(event, AttemptChecked) and event.record.passed
            style = "bold" if isinstance(event, AttemptStarted) else ("green" if passed else "yellow")
            self.console.print(Text(line, style=style), overflow="fold")
        elif isinstance(event, RouteChosen):
            self.pause()
            self.console.print(route_text(event.decision), overflow="ellipsis", no_wrap=True)
        elif isinstance(event, StepStarted):
            self._streamed = ""
            self._start(f"{event.worker} is thinking…")
        elif isinstance(event, TextDelta):
            self._streamed += event.text
            self._start(f"{event.worker} is writing…")
        elif isinstance(event, AssistantMessage):
            self.pause()
            if event.message.tool_calls:
                self._message(event.message.content or "", final=False)
        elif isinstance(event, ToolStarted):
            self._start(f"{event.worker} ▸ {tool_summary(event.call.name, event.call.arguments)}")
        elif isinstance(event, ToolFinished):
            self.pause()
            self._tool(event.worker, event.call, event.result)
        elif isinstance(event, StepFinished):
            self.console.print(Text(f"  ╰ {event.worker} · {usage_text(event.usage)}", style="dim"))
        elif isinstance(event, ProviderFailed):
            self.pause()
            self.console.print(Text(f"✗ {event.worker} failed: {event.error}", style="red"), overflow="fold")
        elif isinstance(event, Notice):
            self._notice(event)
        elif isinstance(event, Compacted):
            self.pause()
            self.console.print(Text(compacted_line(event), style="dim"), overflow="fold")
        elif isinstance(event, TurnFinished):
            self.pause()
            # the answer is the turn's, not a step's: in ultra mode the conductor's plan is a step's reply too
            if event.result.status == "success":
                self._message(event.result.result, final=True)
            elif event.result.error:
                self.console.print(Text(f"! {event.result.error}", style="bold red"), overflow="fold")
            self.console.print(summary_text(event.result), overflow="fold")

    def _workflow(self, event: Event) -> None:
        """Ultra mode: the plan, each step's start and end (as one-shot text mode shows them), their tools."""
        if isinstance(event, WorkflowAgentEvent):
            self._step_event(event)
            return
        self.pause()
        line = workflow_line(event)
        if line:
            style = "bold" if isinstance(event, WorkflowPlanned) else "dim"
            if isinstance(event, WorkflowStepFinished):
                style = "green" if event.status == "success" else "yellow"
            self.console.print(Text(line, style=style), overflow="fold")
        if isinstance(event, WorkflowStepStarted):
            self._running[event.step] = event.worker
        elif isinstance(event, WorkflowStepFinished):
            self._running.pop(event.step, None)
        if self._running:
            self._start(", ".join(f"step {i} {w}" for i, w in sorted(self._running.items())) + " working…")

    def _step_event(self, event: WorkflowAgentEvent) -> None:
        inner = event.inner
        if isinstance(inner, ToolFinished):
            self.pause()
            line = Text(f"  [{event.step}] ", style="dim")
            line.append_text(tool_text(inner.worker, inner.call, inner.result, indent=""))
            self.console.print(line, overflow="ellipsis", no_wrap=True)
        elif isinstance(inner, ProviderFailed) or (isinstance(inner, Notice) and inner.level != "info"):
            self._handle(inner)

    def _message(self, content: str, *, final: bool) -> None:
        if not content.strip():
            return
        if final:
            self.console.print(Markdown(content))
        else:
            self.console.print(Text(content.strip(), style="dim italic"), overflow="fold")

    def _tool(self, worker: str, call: ToolCall, result: ToolResult) -> None:
        self.console.print(tool_text(worker, call, result), overflow="ellipsis", no_wrap=True)
        if call.name in EDIT_TOOLS and not result.is_error:
            diff = edit_diff(result)
            if diff and diff.strip() not in self._shown:
                self.console.print(diff_text(diff), overflow="fold", end="")

    def _notice(self, event: Notice) -> None:
        if event.level == "error":
            self.pause()
            self.console.print(Text(f"! {event.text}", style="bold red"), overflow="fold")
        elif event.level == "warning":
            self.pause()
            self.console.print(Text(f"! {event.text}", style="yellow"), overflow="fold")
        elif event.level == "hint":
            self.pause()
            self.console.print(Text(f"· {event.text}", style="dim"), overflow="fold")

    def _start(self, label: str) -> None:
        self._activity = label
        if not self.live_ok:
            return
        if self._live is None:
            self._live = Live(
                self._renderable(),
                console=self.console,
                transient=True,
                refresh_per_second=10,
                vertical_overflow="crop",
            )
            self._live.start()
        else:
            self._live.update(self._renderable())

    def _renderable(self) -> RenderableType:
        spinner = Spinner("dots", Text(self._activity, style="dim"))
        if not self._streamed:
            return spinner
        tail = "\n".join(self._streamed.rstrip().splitlines()[-STREAM_TAIL:])
        return Group(Text(tail), spinner)

    def shown(self, diff: str) -> None:
        """The user saw this diff while approving it: the edit's result line will not repeat it."""
        with self._lock:
            self._shown.add(diff.strip())

    def pause(self) -> None:
        """Stop the spinner (and erase it) so the terminal is free for a question or a prompt."""
        with self._lock:
            if self._live is not None:
                live, self._live = self._live, None
                live.stop()

    def close(self) -> None:
        self.pause()


def approval_text(request: ApprovalRequest, full: bool) -> Text:
    """The question's context: who wants to do what, and a preview (or, with `full`, all) of the diff."""
    text = Text("? ", style="bold yellow")
    text.append(request.agent or "a worker", style="bold cyan")
    if request.kind == "exec" and request.tool in ("shell", "git_commit"):
        text.append(f" wants to run $ {request.summary.removeprefix('shell: ')}\n")
    elif request.kind == "exec":
        text.append(f" wants to call {request.summary}\n")
    else:
        text.append(f" wants to {request.summary}\n")
    if request.kind == "edit":
        text.append_text(diff_text(request.detail, limit=None if full else 12))
    elif request.detail.strip() and (full or request.detail.strip() not in request.summary):
        shown = request.detail if full else "\n".join(request.detail.splitlines()[:12])
        text.append("    " + shown.replace("\n", "\n    ") + "\n", style="bold")
    return text


def transcript_text(messages: Sequence[Message], turns: int = 2) -> list[RenderableType]:
    """The last `turns` exchanges of a resumed transcript: each task, its tool calls by agent, the answer."""
    starts = [i for i, m in enumerate(messages) if m.role == "user"]
    out: list[RenderableType] = []
    for m in messages[starts[-turns] if len(starts) >= turns else 0 :]:
        if m.role == "user":
            task = (m.content or "").split(ATTACHMENTS, 1)[0]
            out.append(Text(f"› {task}", style="bold"))
        elif m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                out.append(
                    Text(f"  {m.worker or '?'} ▸ {tool_summary(call.name, call.arguments)}", style="dim")
                )
        elif m.role == "assistant" and (m.content or "").strip():
            out.append(Text(f"↳ {m.worker or '?'}", style="dim"))
            out.append(Markdown(m.content or ""))
    return out
