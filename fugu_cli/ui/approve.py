"""Approvals in `ask` mode: y / n / always (this prefix, for the session) / d (show the full diff, ask again).

The tool layer calls `Approvals` from the turn's thread; the question is handed to the main thread (which owns
the terminal) through a queue, so nothing reads the tty from two threads. A denial reaches the model as a tool
result (the tool layer does that); this module only asks.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fugu_cli.tools import Answer, ApprovalRequest

CHOICES: dict[str, Answer | None] = {"y": "yes", "n": "no", "a": "always", "d": None}
WORDS: dict[str, str] = {"yes": "y", "no": "n", "always": "a", "diff": "d"}


@dataclass
class Question:
    """One pending approval: the turn's thread waits on `done` until the main thread answers."""

    request: ApprovalRequest
    done: threading.Event = field(default_factory=threading.Event)
    answer: Answer = "no"

    def reply(self, answer: Answer) -> None:
        self.answer = answer
        self.done.set()


class Approvals:
    """The `Approver` handed to build_session; `pending()` gives the main thread the next question."""

    def __init__(self, before_ask: Callable[[], None] = lambda: None) -> None:
        self.before_ask = before_ask
        self.cancelled = threading.Event()
        self._questions: queue.Queue[Question] = queue.Queue()

    def __call__(self, request: ApprovalRequest) -> Answer:
        if self.cancelled.is_set():
            return "no"
        self.before_ask()
        question = Question(request)
        self._questions.put(question)
        while not question.done.wait(0.1):
            if self.cancelled.is_set():
                return "no"
        return question.answer

    def pending(self, timeout: float) -> Question | None:
        try:
            return self._questions.get(timeout=timeout)
        except queue.Empty:
            return None


def parse_choice(text: str) -> str | None:
    """`y`, `yes`, `A`, `diff` … to one of y/n/a/d; None for anything else."""
    word = text.strip().lower()
    if word in CHOICES:
        return word
    return WORDS.get(word)


def ask(
    request: ApprovalRequest,
    read: Callable[[str], str],
    show: Callable[[ApprovalRequest, bool], None],
) -> Answer:
    """Show the request, read a choice until it is y/n/a; `d` shows the full detail and asks again."""
    show(request, False)
    while True:
        choice = parse_choice(read(_question(request)))
        if choice == "d":
            show(request, True)
            continue
        if choice is None:
            continue
        answer = CHOICES[choice]
        assert answer is not None
        return answer


def _question(request: ApprovalRequest) -> str:
    if request.tool == "exit_plan_mode":
        return "Run this plan? [y]es, asking before edits  [a]ccept edits  [n]o, keep planning  [d] show it: "
    what = {"edit": "edit", "web": "fetch"}.get(request.kind, "run")
    return f"Allow {request.agent} to {what} this? [y]es [n]o [a]lways ({request.prefix}) [d]iff: "


def read_key(message: str) -> str:
    """One key press (y/n/a/d) or a typed word and Enter; Ctrl-C raises KeyboardInterrupt, Ctrl-D means no."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

    bindings = KeyBindings()

    def choose(key: str) -> None:
        @bindings.add(key)
        def _(event: KeyPressEvent) -> None:
            if event.current_buffer.text:
                event.current_buffer.insert_text(key)
            else:
                event.app.exit(result=key.lower())

    for key in "ynadYNAD":
        choose(key)

    @bindings.add("escape")
    def _(event: KeyPressEvent) -> None:
        event.app.exit(result="n")

    session: PromptSession[str] = PromptSession(key_bindings=bindings)
    try:
        return session.prompt(message)
    except EOFError:
        return "n"
