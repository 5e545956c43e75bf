"""Where a conductor's workflows are tried while it trains or is judged: one interface, `Environment`, and
the replay environment (measured outcomes, `conductor/replay.py`'s rules). The live one, fugu's own ultra
runner on an eval suite, is `fugu_cli/eval/conductor_env.py` (it sits above the conductor's layer).

Never prints.
"""

from __future__ import annotations

from typing import Protocol

from fugu_cli.conductor.replay import Outcome, Replan, Rules, score_text
from fugu_cli.conductor.tasks import Item
from fugu_cli.router.data import RewardMatrix
from fugu_cli.router.replay import ReplayConfig, ReplayEnv

ATTEMPTS = 25  # attempts per (task, worker) drawn: 5 steps of 5 sub-steps at depth 1 never repeat a draw


class Environment(Protocol):
    """Runs a conductor's reply on an item and says what it earned."""

    @property
    def rules(self) -> Rules: ...

    def outcome(self, item: Item, text: str, replan: Replan | None = None) -> Outcome: ...


class ReplayEnvironment:
    """Workflows replayed on a reward matrix (no keys, milliseconds a workflow)."""

    def __init__(self, data: RewardMatrix, rules: Rules, seed: int = 0, check_accuracy: float = 0.9) -> None:
        self.data = data
        self._rules = rules
        self.env = ReplayEnv(data, ReplayConfig(check_accuracy, max_attempts=ATTEMPTS, seed=seed))

    @property
    def rules(self) -> Rules:
        return self._rules

    def outcome(self, item: Item, text: str, replan: Replan | None = None) -> Outcome:
        return score_text(self.env, item.task, text, item.workers, self._rules, replan)
