"""What a turn runs under: `TurnSettings`, a value the session snapshots when a turn starts (permission mode,
allow and deny rules with the user's "always" grants, plan mode, the forced worker, ultra mode, limits, the
folders added beside the repository, the check), and
`SettingsBox`, the one place that changes them, behind a lock, for whoever calls from another thread (the
REPL, stream-json control requests, serve) while a turn runs.

A change made during a turn applies from the next turn; an "always" answer also holds for the rest of the
run that asked it (the agent keeps its own copy). Never prints.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fugu_cli.agent import Limits
from fugu_cli.tools import PermissionPolicy
from fugu_cli.types import PermissionMode


@dataclass(frozen=True)
class Check:
    """The command that judges each attempt at a turn (`--check`, `[checks] verify`): exit code 0 passes."""

    command: str
    timeout_s: float = 600.0


@dataclass(frozen=True)
class TurnSettings:
    permission: PermissionPolicy = field(default_factory=PermissionPolicy)
    worker: str | None = None  # forced by the user (`/worker NAME`, --worker, set_model); None: the router
    ultra: bool = False  # the turn goes to the conductor
    limits: Limits = field(default_factory=Limits)
    dirs: tuple[Path, ...] = ()  # folders beside the repository the tools may reach (--add-dir, /add-dir)
    check: Check | None = None  # judges each attempt; a failed one is set aside and the next worker tries
    planning: bool = False  # plan mode: read-only until the user approves a plan (`exit_plan_mode`)

    @property
    def mode(self) -> PermissionMode:
        """The mode tools run under: read-only while planning."""
        return "read-only" if self.planning else self.permission.mode

    @property
    def policy(self) -> PermissionPolicy:
        """The permission policy tools run under (read-only while planning)."""
        if not self.planning:
            return self.permission
        return dataclasses.replace(self.permission, mode="read-only")


@dataclass(frozen=True)
class Overrides:
    """For one turn only, on top of the session's settings: a custom command's worker and allowed tools,
    a serve request's mode."""

    worker: str | None = None
    allow: tuple[str, ...] = ()
    ultra: bool | None = None

    def applied(self, settings: TurnSettings) -> TurnSettings:
        return dataclasses.replace(
            settings,
            permission=settings.permission.allowing(*self.allow),
            worker=self.worker or settings.worker,
            ultra=settings.ultra if self.ultra is None else self.ultra,
        )


class SettingsBox:
    """The session's current settings. Every read is a snapshot; every change replaces the value."""

    def __init__(self, initial: TurnSettings) -> None:
        self._value = initial
        self._lock = threading.Lock()

    def get(self) -> TurnSettings:
        with self._lock:
            return self._value

    def set_mode(self, mode: PermissionMode, planning: bool = False) -> None:
        """Tools run in `mode` from the next turn (after plan mode, when `planning` is off)."""
        with self._lock:
            self._value = dataclasses.replace(
                self._value,
                permission=dataclasses.replace(self._value.permission, mode=mode),
                planning=planning,
            )

    def set_planning(self, on: bool) -> None:
        with self._lock:
            self._value = dataclasses.replace(self._value, planning=on)

    def set_worker(self, worker: str | None) -> None:
        with self._lock:
            self._value = dataclasses.replace(self._value, worker=worker)

    def set_check(self, check: Check | None) -> None:
        with self._lock:
            self._value = dataclasses.replace(self._value, check=check)

    def set_ultra(self, on: bool) -> None:
        with self._lock:
            self._value = dataclasses.replace(self._value, ultra=on)

    def add_dir(self, folder: Path) -> None:
        with self._lock:
            if folder not in self._value.dirs:
                self._value = dataclasses.replace(self._value, dirs=(*self._value.dirs, folder))

    def grant(self, prefix: str) -> None:
        """The user answered "always": allow `prefix` in every later turn."""
        with self._lock:
            self._value = dataclasses.replace(self._value, permission=self._value.permission.allowing(prefix))
