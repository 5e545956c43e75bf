"""Calling workers: `WorkerCall` (route → attempts with retries and backoff → failover → a ledger row per
failed attempt) and `WorkerHealth` (cool-downs of failing workers, kept across calls and turns).

The seam between whoever decides what to ask (the agent loop, compaction, serve's pass-through) and the
transport that asks it (fugu_cli/llm). Never prints.
"""

from fugu_cli.calls.health import Condition, HealthSettings, WorkerHealth, worker_key
from fugu_cli.calls.worker_call import AllFailed, Answer, Call, Exclusions, RetryPolicy, Try, WorkerCall

__all__ = [
    "AllFailed",
    "Answer",
    "Call",
    "Condition",
    "Exclusions",
    "HealthSettings",
    "RetryPolicy",
    "Try",
    "WorkerCall",
    "WorkerHealth",
    "worker_key",
]
