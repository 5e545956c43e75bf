"""One real local Ray instance for the tests that need it (2 CPUs, its own temp folder), started on first use
and stopped after the last test that uses it; and how to find the processes running its tasks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import parent_pid, processes


@dataclass(frozen=True)
class RayInstance:
    temp_dir: Path

    @property
    def address(self) -> str:
        """Where another process joins this instance (`--ray-address`)."""
        import ray

        return str(ray.get_runtime_context().gcs_address)

    def raylet_pid(self) -> int:
        for pid, cmd in processes():
            if "raylet" in cmd and str(self.temp_dir) in cmd:
                return pid
        raise AssertionError(f"no raylet of {self.temp_dir} is running")

    def task_pids(self, name: str) -> list[int]:
        """The worker processes of this instance running a task named `name` now (titled ray::NAME)."""
        raylet = self.raylet_pid()
        return [
            pid for pid, cmd in processes() if cmd.startswith(f"ray::{name}") and parent_pid(pid) == raylet
        ]

    def free_cpus(self) -> float:
        import ray

        return float(ray.available_resources().get("CPU", 0.0))


def uses_ray(item: pytest.Item) -> bool:
    """Whether a collected test asks for the one local instance."""
    return "ray_instance" in getattr(item, "fixturenames", ())


class _Shared:
    """This process's one instance, and the tests of this run that use it and have not yet run."""

    instance: RayInstance | None = None
    left: set[str] | None = None

    @classmethod
    def start(cls) -> RayInstance:
        """`ray.init` with 2 CPUs in a short temp folder (its socket paths must stay under 108 bytes)."""
        import ray

        if cls.instance is None:
            temp = Path(tempfile.mkdtemp(prefix="fugu-ray-", dir="/tmp"))
            ray.init(num_cpus=2, _temp_dir=str(temp), include_dashboard=False, log_to_driver=False)
            cls.instance = RayInstance(temp)
        return cls.instance

    @classmethod
    def stop(cls) -> None:
        if cls.instance is not None:
            import ray

            ray.shutdown()
            shutil.rmtree(cls.instance.temp_dir, ignore_errors=True)
            cls.instance = None


@pytest.fixture(scope="session")
def _ray_stopped_at_the_end() -> Iterator[None]:
    yield
    _Shared.stop()


@pytest.fixture
def ray_instance(request: pytest.FixtureRequest, _ray_stopped_at_the_end: None) -> Iterator[RayInstance]:
    """The local instance, started by the first test that asks for it and stopped after the last one of this
    run (the tests that use it run in one pytest-xdist worker; an idle instance's processes take about 4 % of
    a core), or at the end of the session if that test never comes (`-x`)."""
    if _Shared.left is None:
        _Shared.left = {i.nodeid for i in request.session.items if uses_ray(i)}
    instance = _Shared.start()
    try:
        yield instance
    finally:
        _Shared.left.discard(request.node.nodeid)
        if not _Shared.left:
            _Shared.stop()
