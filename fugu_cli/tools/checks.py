"""Diagnostics after an edit: the `[checks] after_edit` commands (`{files}` is the edited files, quoted) run
in the sandbox as the shell tool's commands do, and a configured language server's diagnostics for the files
(lsp.py); what they find is returned for the edit's result, bounded, and said to the user (`notify`).

Off unless `[checks]` declares something. A check that cannot run says so in the report; it never fails the
edit, which has already happened.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.base import Invocation, cap_text
from fugu_cli.tools.shell import effective_policy
from fugu_cli.tools.textio import shown

PER_CHECK_CHARS = 2000


def after_edit(inv: Invocation, paths: Sequence[Path]) -> str:
    """The findings of the configured checks on `paths` ('' when none are configured)."""
    checks = inv.ctx.checks
    if not checks.commands and not checks.lsp:
        return ""
    rels = [inv.rel(p) for p in paths]
    parts: list[str] = []
    failed = 0
    for template in checks.commands:
        command = template.replace("{files}", " ".join(shlex.quote(r) for r in rels))
        ok, text = _run(inv, command, checks.timeout_s)
        failed += not ok
        parts.append(f"$ {command}\n{text}" if text else f"$ {command}")
    if checks.lsp:
        from fugu_cli.tools.lsp import diagnostics

        found = diagnostics(inv, checks.lsp, paths, checks.timeout_s)
        failed += bool(found)
        parts.append(f"{checks.lsp[0]} (language server):\n{found or 'no diagnostics'}")
    head = "Checks after this edit found problems" if failed else "Checks after this edit passed"
    report = cap_text(f"{head} ({', '.join(rels)}):\n" + "\n".join(parts), checks.max_chars)
    if inv.ctx.notify is not None:
        first = head + (f": {failed} of {len(parts)} failed" if failed else "")
        inv.ctx.notify(f"{first} ({', '.join(rels)})")
    return report


def _run(inv: Invocation, command: str, timeout: float) -> tuple[bool, str]:
    """(passed, its output and exit code when it failed) of one check command."""
    done = sb.run(
        ["bash", "-c", command],
        cwd=inv.root,
        policy=effective_policy(inv.ctx),
        timeout=timeout,
        cancel=inv.ctx.cancel,
    )
    text = cap_text(shown(done.output.decode("utf-8", "replace")).strip(), PER_CHECK_CHARS)
    if done.timed_out:
        return False, f"{text}\n[timed out after {timeout:g} s]".strip()
    if done.cancelled:
        return False, "[cancelled]"
    if done.exit_code == 0:
        return True, ""
    return False, f"{text}\n[exit code {done.exit_code}]".strip()
