"""Planning with a trained conductor, `[ultra] conductor = "local:PATH"`: the local model writes the
workflow from the prompt it was trained on; a validated parse, one repair round, and when the plan still does
not parse, the prompted conductor plans instead, with a visible notice.

The model is loaded on the first plan and kept; generation is serialised (recursion steps plan from threads).
Never prints: the notice is an event.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fugu_cli import prompts
from fugu_cli.agent import TurnIO
from fugu_cli.conductor.planner import Planner, PlanOutcome, PlanRequest
from fugu_cli.conductor.tasks import render
from fugu_cli.conductor.workflow import PlanError, parse
from fugu_cli.events import Notice
from fugu_cli.ledger import Ledger
from fugu_cli.types import Usage, Worker

MAX_NEW_TOKENS = 256


class LocalPlanner:
    """Plans like `Planner` (same request, same outcome), with the trained model at `path`; `fallback` is the
    prompted conductor."""

    def __init__(self, path: Path, fallback: Planner) -> None:
        self.path = path
        self.fallback = fallback
        self.label = f"trained conductor {path}"
        self._policy: Any = None
        self._lock = threading.Lock()

    @property
    def pool(self) -> Sequence[Worker]:
        return self.fallback.pool

    def plan(self, req: PlanRequest, ledger: Ledger, turn: int, io: TurnIO) -> PlanOutcome:
        names = [w.name for w in self.pool]
        allow = req.depth < self.fallback.max_depth
        workers = [(w.name, w.description or w.model) for w in self.pool]
        prompt = render(req.request, workers, allow_conductor=allow, part=req.subtask)
        error = ""
        for attempt in range(2):
            if attempt:
                prompt += " " + prompts.load("conductor_repair").replace("{{error}}", error) + "\nWorkflow:\n"
            text = self._generate(prompt)
            try:
                workflow = parse(text, names, allow_conductor=allow)
            except PlanError as e:
                error = str(e)
                prompt += text
                continue
            return PlanOutcome(workflow, None, Usage(), {}, 0, repaired=attempt > 0, planner=self.label)
        io.emit(
            Notice(
                session_id=self.fallback.deps.session_id,
                level="warning",
                text=f"the {self.label} wrote no valid workflow twice ({error}); "
                f"the prompted conductor ({self.fallback.conductor}) plans instead",
            )
        )
        return self.fallback.plan(req, ledger, turn, io)

    def _generate(self, prompt: str) -> str:
        from fugu_cli.conductor import lm

        with self._lock:
            if self._policy is None:
                self._policy = lm.load(self.path)
            return lm.generate(self._policy, [prompt], max_new_tokens=MAX_NEW_TOKENS)[0]
