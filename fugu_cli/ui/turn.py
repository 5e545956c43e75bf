"""Run one turn in a thread, so the main thread stays free for Ctrl-C (Python delivers signals there) and, in
the REPL, for approval questions. Used by one-shot runs and the REPL alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from fugu_cli.events import Emit
from fugu_cli.session import Session
from fugu_cli.turn_settings import Overrides
from fugu_cli.types import Image, TurnResult


class TurnThread:
    """`session.run_turn(task)` on a daemon thread; `cancel` asks it to stop (the cut step is recorded)."""

    def __init__(
        self,
        session: Session,
        task: str,
        emit: Emit,
        overrides: Overrides | None = None,
        images: Sequence[Image] = (),
    ) -> None:
        self.cancel = threading.Event()
        self.done = threading.Event()  # set when the turn has returned or raised
        self._result: TurnResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._work, args=(session, task, emit, overrides, images), name="fugu-turn", daemon=True
        )

    def _work(
        self, session: Session, task: str, emit: Emit, overrides: Overrides | None, images: Sequence[Image]
    ) -> None:
        try:
            self._result = session.run_turn(task, emit, self.cancel, overrides=overrides, images=images)
        except BaseException as e:
            self._error = e
        finally:
            self.done.set()

    def run(self, wait: Callable[[float], None] | None = None) -> TurnResult:
        """Start the turn and wait for it. `wait(seconds)` is called while it runs (the REPL serves approval
        questions there); a KeyboardInterrupt out of it sets `cancel` and the wait goes on. Re-raises what
        the turn raised."""
        self._thread.start()
        while self._thread.is_alive():
            try:
                if wait is None:
                    self._thread.join(0.1)
                else:
                    wait(0.05)
            except KeyboardInterrupt:
                self.cancel.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
