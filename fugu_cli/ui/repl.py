"""The interactive REPL: read a line, run it as a slash command or a turn, render the turn, repeat.

The prompt appears before anything heavy loads: the session (pool probe, router) is built, and litellm
imported if a worker needs it, in a background thread started after the first prompt is drawn; the first turn
waits only if that is not done.
Each turn runs in its own thread so Ctrl-C in the main thread can cancel it; approvals come back here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fugu_cli import __version__
from fugu_cli.errors import FuguError
from fugu_cli.options import RunOptions
from fugu_cli.ui import approve, commands
from fugu_cli.ui.prompt import ReplCompleter, expand_mentions, make_session

if TYPE_CHECKING:
    from rich.console import Console

    from fugu_cli.session import Session
    from fugu_cli.tools import Answer, ApprovalRequest
    from fugu_cli.turn_settings import Overrides
    from fugu_cli.ui.render import Renderer

log = logging.getLogger("fugu")


class LoadFailed(Exception):
    """The background build of the session failed; the REPL reports it and exits."""


class Loader:
    """Builds the session in a thread (then preloads rich, and litellm if a worker needs it) while the user
    types."""

    def __init__(self, build: Callable[[], Session], on_failure: Callable[[], None] = lambda: None) -> None:
        self._build = build
        self._on_failure = on_failure
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.session: Session | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fugu-loader", daemon=True)
            self._thread.start()

    @property
    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self) -> Session:
        self.start()
        while not self._done.wait(0.05):
            pass
        if self.session is None:
            raise LoadFailed() from self.error
        return self.session

    def _run(self) -> None:
        try:
            self.session = self._build()
        except BaseException as e:
            self.error = e
            self._done.set()
            self._on_failure()
            return
        self._done.set()
        _preload(self.session)


def _preload(session: Session) -> None:
    try:
        import fugu_cli.ui.render  # noqa: F401  (rich: the first turn should not pay for it)

        session.warm()
    except Exception:  # the first turn will meet the same problem and report it properly
        log.debug("preload failed", exc_info=True)


class Repl:
    """One interactive run: the prompt, the live session, its renderer and approvals."""

    def __init__(self, opts: RunOptions) -> None:
        self.opts = opts
        self.approvals = approve.Approvals(before_ask=self._pause)
        self.loader = Loader(lambda: self._build(self.opts), self._interrupt_prompt)
        self.prompt = make_session(self._message, ReplCompleter(self._commands, self._arguments, self._root))
        self._console: Console | None = None
        self._renderer: Renderer | None = None
        self._session: Session | None = None
        self._running = True
        self._turns = 0

    # --- the Context that slash commands use ------------------------------------------------------------

    @property
    def console(self) -> Console:
        if self._console is None:
            from fugu_cli.ui.render import make_console

            self._console = make_console()
        return self._console

    @property
    def session(self) -> Session:
        if self._session is None:
            if not self.loader.ready:
                self._say("starting the pool and the router…", "dim")
            self._session = self.loader.wait()
        return self._session

    def switch_session(self, resume: str | None) -> None:
        worker = self._session.settings().worker if self._session else self.opts.worker
        opts = dataclasses.replace(self.opts, resume=resume, continue_last=False, worker=worker)
        with self.console.status("loading…"):
            session = self._build(opts)
        if self._session is not None:
            self._session.close()
        self._session = session
        if resume:
            self._show_resumed(session)
        else:
            self._say(f"new session {session.id}", "dim")

    def stop(self) -> None:
        self._running = False

    def run_prompt(self, text: str, worker: str | None = None, allow: Sequence[str] = ()) -> None:
        from fugu_cli.turn_settings import Overrides

        self._turn(text, Overrides(worker, tuple(allow)))

    # --- the loop -----------------------------------------------------------------------------------------

    def run(self) -> int:
        print(f"fugu {__version__} · /help for commands · Ctrl-D exits", flush=True)
        try:
            self._ask_trust()
        except FuguError as e:  # an unreadable project config: the same error the session would give
            print(f"fugu: {e}", flush=True)
            return e.exit_code
        except (EOFError, KeyboardInterrupt):
            return 130
        try:
            if self.opts.resuming:
                self._show_resumed(self.session)
            else:
                self.prompt.app.after_render += lambda _: self.loader.start()
            self._loop()
        except LoadFailed:
            return self._load_error()
        except KeyboardInterrupt:  # while a resumed session was still loading
            return 130
        finally:
            if self._session is not None:
                self._session.close()  # its MCP servers stop with it
        self._goodbye()
        return 0

    def _ask_trust(self) -> None:
        """Once per folder: may this repository's own .fugu/config.toml set workers, permissions, tools?"""
        from fugu_cli.options import find_repo_root, project_config_path

        if self.opts.trust_project:
            return
        root = find_repo_root(self.opts.cwd.resolve()) or self.opts.cwd.resolve()
        own = (project_config_path(self.opts.cwd), root / ".mcp.json", root / ".claude")
        if not any(p.exists() for p in own):
            return  # nothing to ask (and pydantic, which reading a config needs, stays unloaded)
        from fugu_cli.config import needs_trust, trust
        from fugu_cli.extension_config import untrusted_extensions

        wanted = needs_trust(self.opts.cwd)
        extensions = untrusted_extensions(root)
        if not wanted and not extensions:
            return
        if wanted:
            print(f"This folder's .fugu/config.toml asks for: {', '.join(wanted)}.", flush=True)
        if extensions:
            print(f"This folder would run commands of its own: {', '.join(extensions)}.", flush=True)
        answer = input(
            f"Trust {root} (its config may then choose workers, endpoints, permissions, MCP servers and "
            "hooks)? [y/N] "
        )
        if answer.strip().lower() in ("y", "yes"):
            trust(root)
            print("trusted; fugu remembers it", flush=True)
        else:
            print("not trusted: those settings are ignored this time", flush=True)

    def _loop(self) -> None:
        ctrl_c = False
        while self._running:
            try:
                text = self.prompt.prompt()
            except KeyboardInterrupt:
                if ctrl_c:
                    return
                ctrl_c = True
                print("(Ctrl-C again or Ctrl-D to exit)", flush=True)
                continue
            except EOFError:
                return
            ctrl_c = False
            self._handle(text.strip())

    def _handle(self, text: str) -> None:
        if not text:
            return
        try:
            if not commands.dispatch(self, text):
                self._turn(text)
        except KeyboardInterrupt:
            self._say("cancelled", "dim")
        except LoadFailed:
            raise
        except Exception as e:  # one broken command must not end the session people live in
            log.error("command failed", exc_info=e)
            self._say(f"internal error: {type(e).__name__}: {e}", "red")

    def _turn(self, text: str, overrides: Overrides | None = None) -> None:
        from fugu_cli.tools.images import prompt_images
        from fugu_cli.ui.custom import attach_resources

        session = self.session
        task, attached = expand_mentions(text, session.root)
        images, problems = prompt_images(text, session.roots())
        for problem in problems:
            self._say(problem, "red")
        try:
            task, resources = attach_resources(task, session)
        except FuguError as e:
            self._say(str(e), "red")
            return
        attached += resources + [i.name for i in images]
        if attached:
            self._say(f"attached {', '.join(attached)}", "dim")
        from fugu_cli.ui.turn import TurnThread

        renderer = self.renderer
        self.approvals.cancelled.clear()
        turn = TurnThread(session, task, renderer.on_event, overrides, images)
        pressed = threading.Event()
        try:
            with _sigint_sets(pressed), _typed_enter_kept():
                result = turn.run(self._waiter(turn.cancel, pressed))
        except FuguError as e:
            self._say(f"{e}", "red")
        except Exception as e:  # a bug: the traceback goes to the log, one line to the screen
            from fugu_cli.logs import log_path

            log.error("turn failed", exc_info=e)
            lines = "".join(traceback.format_exception_only(type(e), e)).strip()
            self._say(f"internal error: {lines} (details in {log_path()})", "red")
        else:
            if result.status == "interrupted":
                self._say("interrupted; the session is intact (the cut step is in /trace)", "dim")
        finally:
            renderer.pause()
            self._turns += 1

    def _waiter(self, cancel: threading.Event, pressed: threading.Event) -> Callable[[float], None]:
        """While the turn runs: serve approval questions; Ctrl-C cancels the step (the session stays).

        Ctrl-C while the main thread waits only sets `pressed` (see `_sigint_sets`): a KeyboardInterrupt
        raised inside the question queue's wait could land between its lock's acquire and release and leave
        the lock held, hanging the REPL after the cut turn. In an approval question the terminal is raw and
        prompt_toolkit raises KeyboardInterrupt for the key itself, out of any lock."""

        def wait(seconds: float) -> None:
            question: approve.Question | None = None
            try:
                question = self.approvals.pending(seconds)
                if question is not None:
                    question.reply(self._ask(question.request))
            except KeyboardInterrupt:
                if question is not None:
                    question.reply("no")
                pressed.set()
            if pressed.is_set() and not cancel.is_set():
                cancel.set()
                self.approvals.cancelled.set()
                self._pause()
                self._say("⏹ interrupting the step…", "yellow")

        return wait

    def _ask(self, request: ApprovalRequest) -> Answer:
        from fugu_cli.ui.render import approval_text

        def show(req: ApprovalRequest, full: bool) -> None:
            self.console.print(approval_text(req, full), overflow="fold", end="")

        answer = approve.ask(request, approve.read_key, show)
        if request.kind == "edit":
            self.renderer.shown(request.detail)
        verdict = {"yes": "allowed once", "no": "denied", "always": f"always allowed: {request.prefix}"}
        if request.tool == "exit_plan_mode":
            verdict = {"yes": "running the plan, asking before edits", "no": "keep planning"}
            verdict["always"] = "running the plan, edits accepted"
        self._say(f"  {verdict[answer]}", "dim")
        return answer

    # --- pieces -------------------------------------------------------------------------------------------

    @property
    def renderer(self) -> Renderer:
        if self._renderer is None:
            from fugu_cli.ui.render import Renderer

            self._renderer = Renderer(self.console)
        return self._renderer

    def _say(self, text: str, style: str = "") -> None:
        self.console.print(text, style=style, markup=False, highlight=False, emoji=False, overflow="fold")

    def _pause(self) -> None:
        if self._renderer is not None:
            self._renderer.pause()

    def _build(self, opts: RunOptions) -> Session:
        from fugu_cli.app import build_session

        return build_session(opts, approver=self.approvals)

    def _interrupt_prompt(self) -> None:
        """The background build failed while the prompt waits: end the prompt so the REPL can say why."""
        app = self.prompt.app
        loop = app.loop
        if app.is_running and loop is not None:

            def fail() -> None:
                if app.is_running and not app.is_done:
                    app.exit(exception=LoadFailed())

            loop.call_soon_threadsafe(fail)

    def _load_error(self) -> int:
        error = self.loader.error
        if isinstance(error, FuguError):
            print(f"fugu: {error}", flush=True)
            return error.exit_code
        from fugu_cli.logs import log_path

        log.error("could not start the session", exc_info=error)
        print(f"fugu: could not start the session: {error!r} (details in {log_path()})", flush=True)
        return 1

    def _message(self) -> str:
        worker = self._session.settings().worker if self._session else self.opts.worker
        planning = self._session is not None and self._session.settings().planning
        tags = [t for t in (worker, "ultra" if self._session and self._session.ultra else None) if t]
        tags += ["plan"] if planning else []
        return f"fugu [{' '.join(tags)}] › " if tags else "fugu › "

    def _commands(self) -> Sequence[tuple[str, str]]:
        from fugu_cli.app import repo_root
        from fugu_cli.ui import custom

        own = [(c.name, c.help) for c in commands.COMMANDS.values()]
        theirs = custom.names(repo_root(self._root()), self._session)
        return own + [(n, h) for n, h in theirs if n not in commands.COMMANDS]

    def _arguments(self, command: str) -> Sequence[str]:
        if self._session is None:
            return []
        if command == "worker":
            return [*self._session.workers, "auto"]
        if command == "ultra":
            return ["on", "off"]
        if command == "check":
            return ["auto", "off"]
        if command == "resume":
            return [r.id for r in self._session.recent_sessions(20)]
        return []

    def _root(self) -> Path:
        return self._session.root if self._session else self.opts.cwd

    def _show_resumed(self, session: Session) -> None:
        from fugu_cli.ui.render import transcript_text

        turns = sum(1 for m in session.messages if m.role == "user")
        self._say(f"resumed session {session.id} · {turns} turn(s)", "dim")
        steps = session.ledger.steps()
        last = steps[-1] if steps else None
        # the last step went to a /worker override: it was sticky, so it is again
        if (
            session.settings().worker is None
            and last
            and last.source == "override"
            and last.worker in session.workers
        ):
            session.set_worker(last.worker)
            self._say(f"worker: {last.worker} (/worker auto lets the router pick)", "dim")
        for part in transcript_text(session.messages):
            self.console.print(part, overflow="fold")

    def _goodbye(self) -> None:
        if self._session is not None and self._turns:
            print(f"session {self._session.id} saved · fugu --continue resumes it", flush=True)


def main(opts: RunOptions) -> int:
    """Run the REPL until /exit, Ctrl-D or Ctrl-C twice at an empty prompt; return the exit code."""
    return Repl(opts).run()


@contextmanager
def _typed_enter_kept() -> Iterator[None]:
    """While a turn runs, what the user types waits in the terminal, and the terminal turns each Enter into
    a line feed (ICRNL), which the prompt reads as Ctrl-J: add a line. So `/cost` and Enter typed during
    a turn became a line of the next input, and every Enter after it another. With ICRNL off for the turn
    the Enter stays an Enter, and the prompt sends each typed line when it comes back."""
    try:
        import termios
    except ImportError:  # no POSIX terminal: nothing to keep
        yield
        return
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd):
            raise OSError
        before = termios.tcgetattr(fd)
        during = list(before)
        during[0] &= ~termios.ICRNL
        during[3] &= ~termios.ECHOCTL  # its echo is a carriage return, not "^M"
        termios.tcsetattr(fd, termios.TCSANOW, during)  # not TCSAFLUSH: nothing typed is dropped
    except (OSError, ValueError, termios.error):
        yield
        return
    try:
        yield
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSANOW, before)
        except (OSError, termios.error):
            pass


@contextmanager
def _sigint_sets(pressed: threading.Event) -> Iterator[None]:
    """While a turn runs, SIGINT sets `pressed` instead of raising KeyboardInterrupt wherever the main thread
    happens to be; the REPL's own handler comes back after the turn."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: pressed.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
