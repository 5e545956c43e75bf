"""Agents with a transcript and a ledger scope of their own: `isolation` (shared with ultra mode's workflow
steps) and `delegation` (the `task` tool's subagents, staffed by the router step by step)."""

from fugu_cli.subagents.delegation import Delegation, Staff, SubagentLimits, offer
from fugu_cli.subagents.isolation import fixed_picker, run_isolated

__all__ = ["Delegation", "Staff", "SubagentLimits", "fixed_picker", "offer", "run_isolated"]
