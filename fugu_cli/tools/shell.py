"""The shell tool: one bash command in the repository root, in the sandbox, with a hard timeout and cancel.

Nothing can hang on input: stdin is /dev/null and the new session has no controlling terminal, so a prompt
reads EOF (or fails to open /dev/tty) instead of waiting. The command sees a minimal environment, never
fugu's; everything it starts dies with it; its output is bounded, the full text kept under FUGU_HOME.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fugu_cli.tools import ToolContext
from fugu_cli.tools import sandbox as sb
from fugu_cli.tools.base import Invocation, ToolFailed
from fugu_cli.tools.output import Capture, default_output_dir
from fugu_cli.tools.rules import analyze

MAX_TIMEOUT_S = 600.0
_TRAILER = 600  # room for the cut note and the exit line, so the registry never cuts a second time


def shell(inv: Invocation, command: str, timeout_s: float | None = None) -> str:
    """Run a bash command in the repository root and return its combined stdout+stderr and exit code.

    The command cannot read input (stdin is empty), so pass flags like `-y` / `--yes` to tools that
    prompt. Long output is cut in the middle (the full output is kept in a file you can read_file).
    Processes still running in the background when the command returns are stopped. Prefer
    read_file/grep/glob for reading and searching files.

    Args:
        command: The bash command line, e.g. "pytest -q tests/test_cli.py" or "ls -la src".
        timeout_s: Seconds before the command (and everything it started) is killed. Default 120, max 600.
    """
    if not command.strip():
        raise ToolFailed("command is empty.")
    timeout = min(timeout_s if timeout_s is not None else inv.ctx.shell_timeout_s, MAX_TIMEOUT_S)
    if timeout <= 0:
        raise ToolFailed(f"timeout_s must be positive (got {timeout_s}).")
    one_line = " ".join(command.split())
    inv.gate(analyze(command), f"shell: {one_line[:200]}", command)
    inv.before_write()
    capture = Capture(inv.ctx.output_cap - _TRAILER, output_dir(inv.ctx))
    done = sb.run(
        ["bash", "-c", command],
        cwd=inv.root,
        policy=effective_policy(inv.ctx),
        timeout=timeout,
        cancel=inv.ctx.cancel,
        sink=capture,
    )
    output = "\n".join(part for part in (capture.text(), *done.notes) if part)
    notice = sb.take_notice()
    if notice:
        output = f"{notice}\n{output}" if output else notice
    if done.cancelled:
        inv.exit_code = 130
        raise ToolFailed(
            f"{output}\n[cancelled: the turn was interrupted; the command and its processes were killed]"
        )
    if done.timed_out:
        inv.exit_code = 124
        raise ToolFailed(
            f"{output}\n[timed out after {timeout:g}s; the command and its child processes were killed. "
            "Use a larger timeout_s, or run a narrower command]"
        )
    code = done.exit_code if done.exit_code is not None else -1
    inv.exit_code = code
    return f"{output}\n[exit code: {code}]" if output else f"[no output; exit code: {code}]"


def effective_policy(ctx: ToolContext) -> sb.SandboxPolicy:
    """The context's sandbox, tightened to read-only when the permission mode is read-only."""
    if ctx.policy.mode == "read-only" and ctx.sandbox.mode == "workspace-write":
        return dataclasses.replace(ctx.sandbox, mode="read-only")
    return ctx.sandbox


def output_dir(ctx: ToolContext) -> Path:
    return ctx.output_dir or default_output_dir()


def command_prefixes(command: str) -> list[str]:
    """The permission prefixes of every command `command` would run ("shell:pytest", "shell:git status")."""
    return [p.prefix for p in analyze(command)]
