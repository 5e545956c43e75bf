"""The shell tool: one bash command in the repository root, in its own process group, with a hard timeout.

Nothing can hang on input: stdin is /dev/null and the new session has no controlling terminal, so a prompt
reads EOF (or fails to open /dev/tty) instead of waiting. Secrets in the environment are not passed on.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import time

from fugu_cli.tools.base import Invocation, ToolFailed, cap_text

MAX_TIMEOUT_S = 600.0
_DRAIN_S = 0.5
_TWO_WORD = frozenset(
    {
        "git",
        "npm",
        "pnpm",
        "yarn",
        "pip",
        "pip3",
        "uv",
        "cargo",
        "make",
        "go",
        "poetry",
        "docker",
        "kubectl",
        "npx",
        "bun",
        "dotnet",
        "gh",
        "hatch",
        "pdm",
        "conda",
        "brew",
        "apt",
        "apt-get",
    }
)
_SECRET_NAME = re.compile(r"(_API_KEY|_TOKEN|_SECRET|_PASSWORD|^AWS_SECRET_ACCESS_KEY)$", re.IGNORECASE)
_NON_INTERACTIVE = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "true",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_NO_INPUT": "1",
}


def shell(inv: Invocation, command: str, timeout_s: float | None = None) -> str:
    """Run a bash command in the repository root and return its combined stdout+stderr and exit code.

    The command cannot read input (stdin is empty), so pass flags like `-y` / `--yes` to tools that
    prompt. Long output is cut in the middle. Processes still running in the background when the
    command returns are stopped. Prefer read_file/grep/glob for reading and searching files.

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
    inv.gate(command_prefixes(command), f"shell: {one_line[:200]}", command)
    inv.before_write()
    # leave room for the trailer and the marker, so the registry's own cap never cuts a second time
    output, code, timed_out = run_command(command, inv.root, timeout, inv.ctx.output_cap - 300)
    inv.exit_code = code
    if timed_out:
        raise ToolFailed(
            f"{output}\n[timed out after {timeout:g}s; the command and its child processes were killed. "
            "Use a larger timeout_s, or run a narrower command]"
        )
    return f"{output}\n[exit code: {code}]" if output else f"[no output; exit code: {code}]"


def command_prefixes(command: str) -> list[str]:
    """The permission prefixes of every simple command in `command` ("shell:pytest", "shell:git status").

    Command substitution could hide anything, so such a command is its own, exact prefix.
    """
    if "$(" in command or "`" in command or "<(" in command or ">(" in command:
        return ["shell:" + " ".join(command.split())]
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|\n")
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:
        return ["shell:" + " ".join(command.split())]
    prefixes: list[str] = []
    words: list[str] = []
    for token in [*tokens, ";"]:
        if token and set(token) <= set(";&|\n"):
            if words and (p := _prefix_of(words)) not in prefixes:
                prefixes.append(p)
            words = []
        else:
            words.append(token)
    return prefixes or ["shell"]


def _prefix_of(words: list[str]) -> str:
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    if not words:
        return "shell:env"
    head = os.path.basename(words[0])
    if head in _TWO_WORD and len(words) > 1 and not words[1].startswith("-"):
        return f"shell:{head} {words[1]}"
    return f"shell:{head}"


def clean_env() -> dict[str, str]:
    """The parent's environment minus anything that looks like a key or token, plus non-interactive knobs."""
    env = {k: v for k, v in os.environ.items() if not _SECRET_NAME.search(k)}
    env.update(_NON_INTERACTIVE)
    return env


def run_command(command: str, cwd: os.PathLike[str] | str, timeout: float, cap: int) -> tuple[str, int, bool]:
    """Run `bash -c command`; return (capped output, exit code, timed out). Kills its group at the end."""
    started = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=clean_env(),
    )
    buffer = _HeadTail(cap)
    try:
        timed_out = _pump(proc, buffer, started + timeout)
    finally:
        # also on KeyboardInterrupt: nothing the command started may outlive the call
        _kill_group(proc.pid)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    code = 124 if timed_out else proc.returncode
    return buffer.text(), code, timed_out


def _pump(proc: subprocess.Popen[bytes], buffer: _HeadTail, deadline: float) -> bool:
    """Read the command's output until it exits and its pipe closes; True if the deadline came first."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        exited_at: float | None = None
        eof = False
        while not (eof and exited_at is not None):
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _DRAIN_S:
                return False  # a background child still holds the pipe; the caller kills it
            if now >= deadline:
                return True
            if eof:
                try:
                    proc.wait(timeout=deadline - now)
                except subprocess.TimeoutExpired:
                    return True
            elif sel.select(timeout=0.05):
                chunk = os.read(proc.stdout.fileno(), 65536)
                eof = not chunk
                buffer.add(chunk)
    return False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _HeadTail:
    """Keeps the first and last `cap` bytes of a stream and counts the rest, so memory stays bounded."""

    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 200)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * self.cap:
            del self.tail[: len(self.tail) - self.cap]

    def text(self) -> str:
        if self.total <= self.cap:
            return bytes(self.head).decode("utf-8", errors="replace").rstrip("\n")
        half = self.cap // 2
        tail = bytes(self.tail[-half:]) if len(self.tail) >= half else bytes(self.head + self.tail)[-half:]
        cut = self.total - half - len(tail)
        head = bytes(self.head[:half]).decode("utf-8", errors="replace")
        body = f"{head}\n[... {cut} characters cut ...]\n{tail.decode('utf-8', errors='replace')}"
        return cap_text(body.rstrip("\n"), self.cap + 100)
