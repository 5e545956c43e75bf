"""The only module that imports ray: join a Ray cluster (or start a local instance), run picklable functions
there as tasks that are retried when their worker process or node dies, wait for them, cancel them.

Knows nothing of eval or training; `ray` is imported on `Cluster.connect`, never at import. Never prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from fugu_cli.errors import FuguError, UsageError

R = TypeVar("R")

INSTALL_HINT = "install it with: pip install 'fugu-cli[ray]'"


class TaskLost(FuguError):
    """A task's worker process or node died more often than it may be retried."""


class TaskCancelled(FuguError):
    """A task was cancelled before it finished."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where tasks run and how. `address` None starts a local Ray instance in this process (stopped again on
    `close`); "auto" joins the cluster this machine belongs to; "ray://host:10001" a remote one."""

    address: str | None = None
    num_cpus: int | None = None  # a local instance's CPUs (None: this machine's)
    temp_dir: str | None = None  # a local instance's session folder (None: Ray's default)
    cpus_per_task: float = 1.0
    max_retries: int = 3  # re-runs of a task whose worker process or node died
    env: Mapping[str, str] = field(default_factory=dict)  # variables the tasks' processes get


@dataclass(frozen=True)
class TaskRef(Generic[R]):
    """A submitted task; `Cluster.result` gives its value."""

    ref: Any  # ray.ObjectRef


def _call(fn: Callable[..., R], *args: Any) -> R:
    """What runs on the node: mark the process as a cluster worker, then call."""
    global IN_CLUSTER_TASK
    IN_CLUSTER_TASK = True
    return fn(*args)


IN_CLUSTER_TASK = False  # True in a process that runs (or ran) a task for a Cluster


class Cluster:
    """A connection to Ray. Use `connect`; `close` when done (it stops a local instance it started)."""

    def __init__(self, ray: Any, spec: ClusterSpec, owned: bool) -> None:
        self._ray = ray
        self.spec = spec
        self._owned = owned
        options: dict[str, Any] = {
            "num_cpus": spec.cpus_per_task,
            "max_retries": spec.max_retries,
            "retry_exceptions": False,  # a task's own exception is its result; only lost workers re-run
        }
        if spec.env:
            options["runtime_env"] = {"env_vars": dict(spec.env)}
        self._options = options
        self._remote = ray.remote(_call)
        self._stored: dict[str, Any] = {}

    @classmethod
    def connect(cls, spec: ClusterSpec) -> Cluster:
        try:
            import ray
        except ImportError:
            raise UsageError(f"the ray executor needs the ray package: {INSTALL_HINT}") from None
        if ray.is_initialized():
            return cls(ray, spec, owned=False)
        kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if spec.address is None:
            kwargs |= {"num_cpus": spec.num_cpus, "include_dashboard": False}
            if spec.temp_dir:
                kwargs["_temp_dir"] = spec.temp_dir
        else:
            kwargs["address"] = spec.address
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = spec.address or "a local Ray instance"
            raise UsageError(f"cannot connect to {where}: {e}") from None
        return cls(ray, spec, owned=True)

    def cpus(self) -> int:
        """The cluster's CPUs now (at least 1)."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def slots(self) -> int:
        """How many tasks can run at once now."""
        return max(1, int(self.cpus() / max(self.spec.cpus_per_task, 1e-3)))

    def put(self, value: Any) -> Any:
        """Store `value` once in the cluster; pass the handle as a task argument instead of the value."""
        return self._ray.put(value)

    def submit(self, fn: Callable[..., R], *args: Any) -> TaskRef[R]:
        """Run `fn(*args)` as a task (its process is titled `ray::fugu:<fn's name>` meanwhile)."""
        return TaskRef(self._task(fn).remote(fn, *args))

    def _task(self, fn: Callable[..., Any]) -> Any:
        name = f"fugu:{getattr(fn, '__name__', type(fn).__name__)}"
        return self._remote.options(name=name, **self._options)

    def wait(self, tasks: Sequence[TaskRef[Any]], timeout_s: float) -> list[TaskRef[Any]]:
        """The tasks among `tasks` that have finished (waiting up to `timeout_s` for the first one)."""
        if not tasks:
            return []
        by_ref = {t.ref: t for t in tasks}
        first, _ = self._ray.wait(list(by_ref), num_returns=1, timeout=timeout_s)
        if not first:
            return []
        done, _ = self._ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        return [by_ref[r] for r in done]

    def result(self, task: TaskRef[R]) -> R:
        """The task's value; its own exception re-raised; TaskLost / TaskCancelled for the cluster's."""
        exc = self._ray.exceptions
        try:
            value: R = self._ray.get(task.ref)
        except exc.TaskCancelledError:
            raise TaskCancelled("the task was cancelled") from None
        except exc.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (exc.WorkerCrashedError, exc.NodeDiedError, exc.ObjectLostError, exc.OwnerDiedError) as e:
            raise TaskLost(
                f"its worker died {self.spec.max_retries + 1} times ({type(e).__name__})"
            ) from None
        return value

    def map(self, fn: Callable[[Any], R], chunks: Sequence[Any], key: str | None = None) -> list[R]:
        """[fn(c) for c in chunks] as tasks, in order. `fn` is stored in the cluster once for all of them, and
        once for every call with the same `key` (an ES fitness, the same in every generation)."""
        shared = self._stored.get(key) if key else None
        if shared is None:
            shared = self.put(fn)
            if key:
                self._stored[key] = shared
        task = self._task(fn)
        tasks: list[TaskRef[R]] = [TaskRef(task.remote(_apply, shared, c)) for c in chunks]
        try:
            return [self.result(t) for t in tasks]
        except BaseException:
            self.cancel(tasks)
            raise

    def cancel(self, tasks: Sequence[TaskRef[Any]]) -> None:
        """Stop these tasks wherever they run (their processes are killed) or wait."""
        for t in tasks:
            try:
                self._ray.cancel(t.ref, force=True)
            except Exception:  # already finished, or its node is gone: nothing left to stop
                continue

    def close(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()


def _apply(fn: Callable[[Any], R], chunk: Any) -> R:
    return fn(chunk)


class ExecutorSettings(Protocol):
    """The `[executor]` settings (config.ExecutorSettings) this module reads."""

    @property
    def kind(self) -> str: ...
    @property
    def address(self) -> str | None: ...
    @property
    def num_cpus(self) -> int | None: ...
    @property
    def cpus_per_job(self) -> float: ...
    @property
    def max_retries(self) -> int: ...


EXECUTORS = ("local", "ray")


def choose(
    settings: ExecutorSettings,
    kind: str | None = None,
    address: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ClusterSpec | None:
    """The cluster the flags (`--executor`, `--ray-address`) and `[executor]` ask for; None: run locally.
    An address alone asks for Ray."""
    if kind is not None and kind not in EXECUTORS:
        raise UsageError(f"--executor {kind}: choose local or ray")
    chosen = kind or ("ray" if address else settings.kind)
    if chosen == "local":
        if address:
            raise UsageError("--ray-address needs --executor ray")
        return None
    return ClusterSpec(
        address=address or settings.address,
        num_cpus=settings.num_cpus,
        cpus_per_task=settings.cpus_per_job,
        max_retries=settings.max_retries,
        env=dict(env or {}),
    )


def forwarded_env(names: Sequence[str | None]) -> dict[str, str]:
    """The values of these variables that are set here (the pool's key variables, for the nodes)."""
    return {n: os.environ[n] for n in dict.fromkeys(names) if n and os.environ.get(n)}
