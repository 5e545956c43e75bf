"""Context is a budget: per-worker token accounting and masking (`budget`), compaction (`compact`) and the
repository map (`repomap`, the one module that imports tree-sitter, lazily).

Sits below the agent and above `llm`, `memory` and the ledger; never prints, never imports litellm itself
(counting goes through `fugu_cli.llm.tokens`).
"""

from __future__ import annotations

from fugu_cli.context.budget import ContextPolicy, Fit, fit

__all__ = ["ContextPolicy", "Fit", "fit"]
