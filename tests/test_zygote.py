"""The tests' fork server (tests/zygote.py) runs `fugu` as `python -m fugu_cli` would: the same exit code,
stdout and stderr, in the given folder with the given environment and stdin, and a run past its timeout is
killed and raises as subprocess.run does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import zygote
from tests.helpers import Run, fugu, parent_pid, processes, write_pool
from tests.loopback import SilentServer


def _both(
    monkeypatch: pytest.MonkeyPatch, *args: str, cwd: Path, stdin: str | None = None
) -> tuple[Run, Run]:
    forked = fugu(*args, cwd=cwd, stdin=stdin)
    monkeypatch.setenv("FUGU_TEST_FORK", "0")
    plain = fugu(*args, cwd=cwd, stdin=stdin)
    monkeypatch.delenv("FUGU_TEST_FORK")
    return forked, plain


def test_a_forked_run_answers_as_a_started_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert zygote.server(["sessions"]) is not None  # this test process forks its runs
    bad = _both(monkeypatch, "sessions", "--no-such-flag", cwd=tmp_path)
    assert bad[0] == bad[1] and bad[0].code == 2 and "--no-such-flag" in bad[0].stderr
    empty = _both(monkeypatch, "sessions", cwd=tmp_path)  # FUGU_HOME from the environment: a fresh one
    assert empty[0] == empty[1] and empty[0].code == 0 and "no sessions" in empty[0].stdout
    (tmp_path / ".fugu").mkdir()
    (tmp_path / ".fugu" / "config.toml").write_text("[ui\n")  # the folder's own config, broken
    broken = _both(monkeypatch, "-p", cwd=tmp_path, stdin="a task from stdin")
    assert broken[0] == broken[1] and broken[0].code != 0 and "config.toml" in broken[0].stderr


def test_a_run_past_its_timeout_is_killed_and_raises(tmp_path: Path) -> None:
    """A run held by a worker that never answers (fugu's own first-byte limit set far past the test's timeout)
    is killed at the timeout, raises as subprocess.run does, and leaves no process behind."""
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text("[llm]\nfirst_byte_timeout_s = 600\n")
    hung = SilentServer()
    try:
        pool = write_pool(
            tmp_path / "pool.toml", [{"name": "w", "model": "openai/w", "api_base": hung.base_url}]
        )
        with pytest.raises(subprocess.TimeoutExpired):
            fugu("-p", "hi", "--pool", str(pool), cwd=tmp_path, timeout=8)
    finally:
        hung.close()
    forks = zygote.server(["-p"])
    assert forks is not None
    assert not [
        pid for pid, _ in processes() if parent_pid(pid) == forks.proc.pid
    ]  # the killed run was reaped
