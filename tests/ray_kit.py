"""One real local Ray instance for the tests that need it (2 CPUs, its own temp folder), started on first use
and stopped at the end of the session; and how to find the processes running its tasks."""

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


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[RayInstance]:
    """`ray.init` with 2 CPUs in a short temp folder (its socket paths must stay under 108 bytes)."""
    import ray

    temp = Path(tempfile.mkdtemp(prefix="fugu-ray-", dir="/tmp"))
    ray.init(num_cpus=2, _temp_dir=str(temp), include_dashboard=False, log_to_driver=False)
    try:
        yield RayInstance(temp)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
