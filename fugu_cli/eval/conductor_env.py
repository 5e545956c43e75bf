"""The live environment for the conductor (`fugu conductor train --env live --suite S`): each workflow
the conductor writes runs through fugu's own ultra runner (as a `--plan`) on a suite task, in a fresh repo,
against the pool; the suite's check decides. The same `Environment` interface as replay (`conductor/env.py`).

A conductor step (recursion) is planned by the session's own conductor, as in `fugu --ultra`. Each run is
stored like any `fugu eval` outcome (arm "ultra"). Never prints.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from fugu_cli.app import Resolved
from fugu_cli.conductor.replay import Outcome, Replan, Rules
from fugu_cli.conductor.tasks import Item
from fugu_cli.conductor.workflow import PlanError, parse
from fugu_cli.eval.jobs import Arm, Job, JobContext, run_job
from fugu_cli.eval.suite import Suite
from fugu_cli.llm import LLM
from fugu_cli.router.data import RewardMatrix
from fugu_cli.store import Store


def suite_matrix(suite: Suite, resolved: Resolved) -> RewardMatrix:
    """The suite's tasks as the rows a conductor trains on, the pool as its workers (no outcomes: the
    live environment measures them)."""
    n, w = len(suite.tasks), len(resolved.pool)
    return RewardMatrix(
        name=f"suite:{suite.name}",
        prompt_ids=tuple(t.id for t in suite.tasks),
        texts=tuple(t.prompt for t in suite.tasks),
        tasks=(suite.name,) * n,
        splits=("",) * n,
        workers=tuple(x.name for x in resolved.pool),
        reward=np.zeros((n, w)),
        worker_info={x.name: {"name": x.description or x.model} for x in resolved.pool},
    )


class LiveEnvironment:
    """Workflows run for real: `item.task` is the index of a task of `suite`."""

    def __init__(
        self,
        suite: Suite,
        resolved: Resolved,
        rules: Rules,
        store: Store,
        llm: LLM | None = None,
    ) -> None:
        self.suite = suite
        self.resolved = resolved
        self._rules = rules
        self.store = store
        self.llm = llm
        self._runs = itertools.count()

    @property
    def rules(self) -> Rules:
        return self._rules

    def outcome(self, item: Item, text: str, replan: Replan | None = None) -> Outcome:
        try:
            workflow = parse(text, item.workers, allow_conductor=self._rules.max_depth > 0)
        except PlanError as e:
            return Outcome(False, False, 0.0, error=str(e))
        workdir = Path(tempfile.mkdtemp(prefix=f"fugu-conductor-{self.suite.name}-"))
        try:
            plan = workdir / "plan.json"
            steps = [s.model_dump(mode="json") for s in workflow.steps]
            plan.write_text(json.dumps({"steps": steps}), encoding="utf-8")
            options = dataclasses.replace(self.resolved.options, plan=plan)
            ultra = self.resolved.config.ultra_settings.model_copy(
                update={"max_depth": self._rules.max_depth}
            )
            config = self.resolved.config.model_copy(update={"ultra_settings": ultra})
            resolved = dataclasses.replace(self.resolved, options=options, config=config)
            ctx = JobContext(self.suite, resolved, workdir, self.store, self.llm, keep=False)
            job = Job(self.suite.tasks[item.task], Arm("ultra", None, ultra=True), next(self._runs))
            record = run_job(ctx, job)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        workers = tuple(s.worker for s in workflow.steps)
        right = record.reward > 0 and record.error is None
        return Outcome(True, right, record.cost_usd, workers, record.error, workflow.steps[-1].worker)
