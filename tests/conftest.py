"""Every test gets its own FUGU_HOME, no provider keys, offline hubs, and the loopback provider fixtures."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.loopback import loopback, loopback_factory
from tests.ray_kit import ray_instance
from tests.serve_kit import serve
from tests.web_kit import pages

__all__ = ["loopback", "loopback_factory", "pages", "ray_instance", "serve"]

_KEY_SUFFIXES = ("_API_KEY", "_API_TOKEN")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("fugu-home")
    monkeypatch.setenv("FUGU_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("NO_COLOR", "1")
    for name in list(os.environ):
        if name.endswith(_KEY_SUFFIXES) or (name.startswith("FUGU_") and name != "FUGU_HOME"):
            monkeypatch.delenv(name, raising=False)
    return home


_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PRISTINE = {sig: signal.getsignal(sig) for sig in _SIGNALS}


@pytest.fixture(autouse=True)
def _signal_handlers() -> None:
    """Each test starts with the process's original SIGINT and SIGTERM handlers: a test that ran a stopping
    run in process (fugu's Stopper ignores a further Ctrl-C while it exits) must not leave them ignored, or
    every process a later test starts inherits the ignored signal and no Ctrl-C reaches it."""
    for sig, handler in _PRISTINE.items():
        if handler is not None and signal.getsignal(sig) != handler:
            signal.signal(sig, handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (tools/test runs it with --dist loadgroup) the tests that use the one local Ray
    instance share a worker, which starts the instance once."""
    for item in items:
        if "ray_instance" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))
