"""Running one hook command: the event as JSON on stdin, in the sandbox, with a timeout; and reading its
answer the way Claude Code does (exit 0: JSON on stdout may decide; exit 2: block, stderr is the reason;
any other exit: a non-blocking error). Decides nothing itself; `fugu_cli.hooks` acts on the answer.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fugu_cli.extension_config import HookSpec
from fugu_cli.tools.sandbox import SandboxPolicy, run

log = logging.getLogger("fugu")

# Claude Code's names for fugu's tools, so a matcher written for Claude (`Bash`, `Edit|Write`) works here
CLAUDE_NAMES = {
    "shell": "Bash",
    "read_file": "Read",
    "write_file": "Write",
    "edit_file": "Edit",
    "glob": "Glob",
    "grep": "Grep",
}
# fugu's argument names under Claude's, added to `tool_input` beside fugu's own
_ALIASES = {"old_text": "old_string", "new_text": "new_string"}


@dataclass(frozen=True)
class HookRun:
    """How one hook command ended, and its JSON answer (None when stdout held none)."""

    spec: HookSpec
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_ms: float
    reply: Mapping[str, Any] | None = None
    error: str = ""  # it could not start at all

    @property
    def blocks(self) -> bool:
        return self.exit_code == 2

    @property
    def failed(self) -> bool:
        """A non-blocking error: the user is told, the work goes on."""
        return self.timed_out or bool(self.error) or self.exit_code not in (0, 2)

    def specific(self) -> Mapping[str, Any]:
        out = (self.reply or {}).get("hookSpecificOutput")
        return out if isinstance(out, dict) else {}

    def field(self, name: str) -> Any:
        return (self.reply or {}).get(name)

    def why_failed(self) -> str:
        what = f"hook `{_short(self.spec.command)}` ({self.spec.event})"
        if self.error:
            return f"{what} could not run: {self.error}"
        if self.timed_out:
            return f"{what} timed out after {self.spec.timeout_s:g} s"
        tail = self.stderr.strip().splitlines()[-1:] or ["no output on stderr"]
        return f"{what} failed with exit code {self.exit_code}: {tail[0][:300]}"


@dataclass(frozen=True)
class HookEnv:
    """Where hooks run: the repository (their working directory) and the sandbox commands get."""

    root: Path
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)


def matches(matcher: str, names: tuple[str, ...]) -> bool:
    """Claude Code's matcher: empty or `*` matches all; else a regular expression that must match a whole
    name (`Write` matches Write only, `Edit|Write` both, `mcp__github__.*` a server's tools)."""
    if matcher in ("", "*"):
        return True
    try:
        pattern = re.compile(matcher)
    except re.error:
        return matcher in names
    return any(pattern.fullmatch(n) for n in names)


def tool_names(tool: str) -> tuple[str, ...]:
    """The names a matcher is tried against: fugu's, and Claude Code's for the same tool."""
    alias = CLAUDE_NAMES.get(tool)
    return (tool, alias) if alias else (tool,)


def claude_input(tool: str, args: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The call's arguments as a hook sees them: fugu's, plus Claude Code's names (`file_path`, absolute;
    `old_string`, `new_string`) so a hook written for Claude reads them."""
    out = dict(args)
    path = args.get("path")
    if tool in ("read_file", "write_file", "edit_file") and isinstance(path, str):
        out.setdefault("file_path", str((root / path).resolve()) if not Path(path).is_absolute() else path)
    for ours, theirs in _ALIASES.items():
        if ours in args:
            out.setdefault(theirs, args[ours])
    return out


def from_claude_input(
    tool: str, original: Mapping[str, Any], updated: Mapping[str, Any], root: Path
) -> dict[str, Any]:
    """A hook's `updatedInput` back in fugu's argument names (Claude's names mapped, fugu's kept)."""
    out = dict(original)
    back = {v: k for k, v in _ALIASES.items()}
    for key, value in updated.items():
        if key == "file_path" and tool in ("read_file", "write_file", "edit_file"):
            out["path"] = _relative(str(value), root)
        elif key in back:
            out[back[key]] = value
        else:
            out[key] = value
    return out


def run_hook(
    spec: HookSpec, payload: Mapping[str, Any], env: HookEnv, cancel: threading.Event | None = None
) -> HookRun:
    """Run `spec.command` with `payload` on stdin, in the sandbox, within its timeout."""
    shell = shutil.which("bash") or "/bin/sh"
    variables = {
        "FUGU_PROJECT_DIR": str(env.root),
        "CLAUDE_PROJECT_DIR": str(env.root),
        "FUGU_HOOK_EVENT": spec.event,
    }
    start = time.perf_counter()
    try:
        done = run(
            [shell, "-c", spec.command],
            cwd=env.root,
            policy=env.sandbox,
            timeout=spec.timeout_s,
            cancel=cancel,
            input=json.dumps(payload, ensure_ascii=False).encode(),
            env=variables,
            merge_stderr=False,
        )
    except OSError as e:
        log.warning("hook %r could not start", spec.command, exc_info=e)
        elapsed = (time.perf_counter() - start) * 1000.0
        return HookRun(spec, None, "", "", False, elapsed, error=e.strerror or str(e))
    elapsed = (time.perf_counter() - start) * 1000.0
    stdout = done.output.decode("utf-8", errors="replace")
    stderr = done.errors.decode("utf-8", errors="replace")
    reply = _json(stdout) if done.exit_code == 0 else None
    return HookRun(spec, done.exit_code, stdout, stderr, done.timed_out or done.cancelled, elapsed, reply)


def _json(stdout: str) -> Mapping[str, Any] | None:
    text = stdout.strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _relative(path: str, root: Path) -> str:
    p = Path(path)
    if p.is_absolute():
        try:
            return p.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return path  # outside the repository: the tool refuses it with its own message
    return path


def _short(command: str) -> str:
    line = " ".join(command.split())
    return line if len(line) <= 60 else line[:57] + "..."
