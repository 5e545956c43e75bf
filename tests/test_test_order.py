"""The times a fresh clone's test run orders its tests by (tests/durations.json, read by tests/conftest.py
where pytest's cache has none), as tools/save_test_durations.py keeps them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_kept_times_are_the_slow_tests_of_files_that_exist(tmp_path: Path) -> None:
    cache = tmp_path / "durations"
    here = "tests/test_store.py::test_a"
    times = {here: 2.345, "tests/test_store.py::test_b": 0.2, "tests/gone.py::test_c": 9.0}
    cache.write_text(json.dumps(times))
    out = tmp_path / "durations.json"
    tool = [sys.executable, str(ROOT / "tools" / "save_test_durations.py")]
    run = subprocess.run([*tool, "--cache", str(cache), "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert json.loads(out.read_text()) == {here: 2.3}  # fast ones count as nothing; deleted files dropped
    missing = subprocess.run([*tool, "--cache", str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 2 and "run tools/test first" in missing.stderr
