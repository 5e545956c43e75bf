"""Approvals: the turn's thread asks, the main thread answers; y / n / always / d(iff, then ask again)."""

from __future__ import annotations

import threading

from fugu_cli.tools import Answer, ApprovalRequest
from fugu_cli.ui.approve import Approvals, ask, parse_choice

REQ = ApprovalRequest("alpha", "edit_file", "edit", "edit calc.py (+1 -1)", "--- a\n+++ b\n", "edit")


def answers(*typed: str) -> tuple[Answer, list[bool], list[str]]:
    keys = iter(typed)
    shown: list[bool] = []
    questions: list[str] = []

    def read(question: str) -> str:
        questions.append(question)
        return next(keys)

    return ask(REQ, read, lambda r, full: shown.append(full)), shown, questions


def test_choices() -> None:
    assert answers("y")[0] == "yes"
    assert answers("n")[0] == "no"
    assert answers("always")[0] == "always"
    answer, shown, questions = answers("d", "what?", "a")
    assert answer == "always"
    assert shown == [False, True]  # a preview first, the full diff after "d"
    assert len(questions) == 3 and "[a]lways (edit)" in questions[0]
    assert parse_choice(" Y ") == "y" and parse_choice("diff") == "d" and parse_choice("maybe") is None


def test_the_question_crosses_threads_and_the_answer_comes_back() -> None:
    paused: list[bool] = []
    approvals = Approvals(before_ask=lambda: paused.append(True))
    got: list[Answer] = []
    worker = threading.Thread(target=lambda: got.append(approvals(REQ)))
    worker.start()
    question = approvals.pending(5.0)
    assert question is not None and question.request is REQ
    assert paused == [True]  # the spinner stops before the question is shown
    question.reply("always")
    worker.join(5)
    assert got == ["always"]
    assert approvals.pending(0.01) is None


def test_a_cancelled_turn_gets_no() -> None:
    approvals = Approvals()
    got: list[Answer] = []
    worker = threading.Thread(target=lambda: got.append(approvals(REQ)))
    worker.start()
    assert approvals.pending(5.0) is not None
    approvals.cancelled.set()  # Ctrl-C while the question was open
    worker.join(5)
    assert got == ["no"]
    assert approvals(REQ) == "no"  # and later questions of the cut turn are refused without asking
    assert approvals.pending(0.01) is None
