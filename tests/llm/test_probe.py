"""check_available: key present and server answering, without importing litellm."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fugu_cli.llm.probe import check_available
from fugu_cli.types import Worker
from tests.loopback import LoopbackServer


def test_local_server_that_answers(loopback: LoopbackServer) -> None:
    ok, reason = check_available(Worker("local", "openai/test-model", api_base=loopback.base_url))
    assert ok, reason
    assert [r.path for r in loopback.requests] == ["/v1/models"]


def test_server_that_does_not_answer() -> None:
    server = LoopbackServer().start()
    base = server.base_url
    server.stop()
    start = time.monotonic()
    ok, reason = check_available(Worker("local", "openai/x", api_base=base), timeout_s=1.0)
    assert not ok and reason == f"no answer from {base}"
    assert time.monotonic() - start < 2.5


def test_key_missing_and_present(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = Worker("gpt", "openai/gpt-4o", api_key_env="FUGU_PROBE_KEY")
    monkeypatch.delenv("FUGU_PROBE_KEY", raising=False)
    assert check_available(worker) == (False, "FUGU_PROBE_KEY not set")
    monkeypatch.setenv("FUGU_PROBE_KEY", "sk-1")
    assert check_available(worker)[0]


def test_client_modules_do_not_import_litellm_until_a_call() -> None:
    code = (
        "import sys\n"
        "import fugu_cli.llm.client, fugu_cli.llm.scripted, fugu_cli.llm.probe\n"
        "from fugu_cli.llm.client import LiteLLMClient\n"
        "LiteLLMClient()\n"
        "assert 'litellm' not in sys.modules, 'litellm imported too early'\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ".", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
