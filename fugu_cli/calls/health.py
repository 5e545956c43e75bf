"""Worker health: which workers failed recently and are left alone for a cool-down, kept across calls and
turns, and in `FUGU_HOME/health.json` across processes (`fugu pool` shows it; the next `fugu -p` skips them).

A worker whose call fails by its own fault (down, silent, refusing our key; never a request it refused)
cools down for `cooldown_s`, doubling with each failure in a row up to `cooldown_max_s`, and at least as long
as a Retry-After asked. After that it is on probation: the next call to it is one attempt, no retries; a
success makes it healthy again. Thread-safe; the file is advisory (the last writer wins). Never prints.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from fugu_cli.errors import ProviderError
from fugu_cli.redact import redact
from fugu_cli.types import Worker

log = logging.getLogger("fugu")
_FORGET_S = 24 * 3600.0  # entries of workers not seen failing for a day are dropped from the file


@dataclass(frozen=True)
class HealthSettings:
    cooldown_s: float = 30.0  # 0: no cool-down, every call tries every worker
    cooldown_max_s: float = 600.0


@dataclass(frozen=True)
class Condition:
    """A worker that failed: how many calls in a row, when it last failed, until when it cools down, why."""

    failures: int
    since: float  # wall clock of the last failure
    until: float  # wall clock: cooling down before this, on probation after it
    error: str

    def left_s(self, now: float) -> float:
        return max(0.0, self.until - now)

    def cooling(self, now: float) -> bool:
        return now < self.until

    def describe(self, now: float) -> str:
        """`cooling down 25 s more (server error 503: upstream is down)` or `on probation (...)`."""
        why = _short(self.error)
        if self.cooling(now):
            return f"cooling down {self.left_s(now):.0f} s more after {_times(self.failures)} ({why})"
        return f"on probation: one attempt after {_times(self.failures)} ({why})"


def worker_key(worker: Worker) -> str:
    """A worker is its name, model and endpoint: another pool's "alpha" elsewhere is another worker."""
    return f"{worker.name}|{worker.model}|{worker.api_base or ''}"


class WorkerHealth:
    """The health of every worker this process (or, with `path`, any fugu on this machine) has called."""

    def __init__(
        self,
        settings: HealthSettings | None = None,
        path: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or HealthSettings()
        self.path = path
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, Condition] = {}
        self._stamp: float | None = None  # the file's mtime when last read

    def __getstate__(self) -> dict[str, object]:
        # pickled to a cluster node (fugu eval on Ray): the settings travel; the node starts healthy, with no
        # file (this machine's FUGU_HOME is not the node's)
        return {"settings": self.settings, "clock": self.clock}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["settings"], None, state["clock"])  # type: ignore[misc, arg-type]

    @property
    def enabled(self) -> bool:
        return self.settings.cooldown_s > 0

    def condition(self, worker: Worker) -> Condition | None:
        """The worker's failure record (None: healthy)."""
        with self._lock:
            self._reload()
            return self._known.get(worker_key(worker))

    def cooling(self, workers: Iterable[Worker]) -> dict[str, Condition]:
        """{name: condition} of the workers cooling down now."""
        now = self.clock()
        with self._lock:
            self._reload()
            found = {w.name: self._known.get(worker_key(w)) for w in workers}
        return {n: c for n, c in found.items() if c is not None and c.cooling(now)}

    def probing(self, worker: Worker) -> bool:
        """Whether the worker's cool-down is over but it has not succeeded since: it gets one attempt."""
        c = self.condition(worker)
        return c is not None and not c.cooling(self.clock())

    def report(self, workers: Iterable[Worker]) -> dict[str, Condition]:
        """{name: condition} of every worker that failed and has not recovered (cooling or on probation)."""
        with self._lock:
            self._reload()
            found = {w.name: self._known.get(worker_key(w)) for w in workers}
        return {n: c for n, c in found.items() if c is not None}

    def failed(self, worker: Worker, error: ProviderError) -> Condition | None:
        """Record a failed call (if the worker is to blame); its new condition (None: cool-downs are off)."""
        if not self.enabled or not error.blames_worker:
            return None
        now = self.clock()
        s = self.settings
        with self._lock:
            self._reload()
            key = worker_key(worker)
            before = self._known.get(key)
            failures = (before.failures if before else 0) + 1
            pause = min(s.cooldown_s * 2.0 ** (failures - 1), max(s.cooldown_max_s, s.cooldown_s))
            pause = max(pause, min(error.retry_after_s or 0.0, max(s.cooldown_max_s, s.cooldown_s)))
            condition = Condition(failures, now, now + pause, redact(str(error))[:500])
            self._known[key] = condition
            self._save()
        log.info("worker %s cools down for %.0f s: %s", worker.name, pause, condition.error)
        return condition

    def recovered(self, worker: Worker) -> None:
        """Record a successful call: the worker is healthy again."""
        with self._lock:
            key = worker_key(worker)
            if key not in self._known and self.path is None:
                return
            self._reload()
            if self._known.pop(key, None) is not None:
                log.info("worker %s is healthy again", worker.name)
                self._save()

    def forget(self) -> int:
        """Clear every record (`fugu pool --reset-health`); returns how many there were."""
        with self._lock:
            self._reload()
            count = len(self._known)
            self._known.clear()
            self._save()
        return count

    # --- the file ---------------------------------------------------------------------------------------

    def _reload(self) -> None:
        if self.path is None:
            return
        try:
            stamp = self.path.stat().st_mtime
        except OSError:
            return
        if stamp == self._stamp:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self._known = {k: _condition(v) for k, v in _entries(data).items()}
        except (OSError, ValueError, TypeError):
            log.warning("cannot read %s; worker health starts afresh", self.path, exc_info=True)
        self._stamp = stamp

    def _save(self) -> None:
        if self.path is None:
            return
        now = self.clock()
        self._known = {k: c for k, c in self._known.items() if now - c.since < _FORGET_S}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({k: asdict(c) for k, c in self._known.items()}), encoding="utf-8")
            os.replace(tmp, self.path)
            self._stamp = self.path.stat().st_mtime
        except OSError:
            log.warning("cannot write %s", self.path, exc_info=True)


def _entries(data: object) -> Mapping[str, dict[str, object]]:
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


def _condition(v: Mapping[str, object]) -> Condition:
    failures, since, until = v.get("failures"), v.get("since"), v.get("until")
    if isinstance(failures, int) and isinstance(since, float | int) and isinstance(until, float | int):
        return Condition(failures, float(since), float(until), str(v.get("error", "")))
    raise ValueError("a health entry needs failures, since and until")


def _short(error: str) -> str:
    cause = error.split("): ", 1)[-1]  # "worker alpha (openai/x): cause" -> "cause"
    return cause if len(cause) <= 80 else cause[:77] + "..."


def _times(n: int) -> str:
    return "1 failed call" if n == 1 else f"{n} failed calls in a row"
