"""`fugu -p`'s progress lines on stderr in text mode: something is said while the router loads and the first
worker is asked, before any step has ended."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import make_repo, write_pool
from tests.loopback import LoopbackServer


def test_a_one_shot_run_says_what_it_waits_for_before_the_first_step_ends(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    loopback.script("slow", [{"content": "hello", "delay_s": 3}])
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "slow",
                "model": "openai/slow",
                "api_base": loopback.base_url,
                "price_in": 1.0,
                "price_out": 1.0,
            }
        ],
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "fugu_cli", "-p", "say hello", "--pool", str(pool), "--router", "prior"],
        cwd=repo,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    assert proc.stderr is not None
    early: list[str] = []
    for line in proc.stderr:
        early.append(line.rstrip("\n"))
        if line.startswith("… step 1"):
            break
    waiting_seen = time.monotonic()
    out, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert [x for x in early if x.startswith("…")] == [
        "… routing with prior among slow",
        "… step 1: waiting for slow",
    ]
    assert time.monotonic() - waiting_seen > 1.5  # said while the worker was still thinking
    assert rest.splitlines()[0].startswith("↳ slow (") and out.strip() == "hello"
