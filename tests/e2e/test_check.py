"""`fugu -p TASK --check CMD` end to end: real git repositories, the real CLI in a subprocess, loopback
workers, the check a real subprocess in the sandbox. A failed attempt is set aside and the next worker
tries; a passing one ends the turn; the budget and a broken check end it honestly."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers import BUGGY, FIXED, call, fugu, git, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

CHECK = "python3 test_calc.py"
WRONG = "def add(a, b):\n    return a * b\n"  # 2 * 3 is not 5: the check fails
USAGE = {"prompt_tokens": 1000, "completion_tokens": 0}  # $0.001 a step at cheap's price, $0.01 at strong's


def _pool(tmp_path: Path, cheap: LoopbackServer, strong: LoopbackServer) -> Path:
    return write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "cheap",
                "model": "openai/cheap",
                "api_base": cheap.base_url,
                "priority": 2,
                "description": "a small fast model",
                "price_in": 1.0,
                "price_out": 1.0,
            },
            {
                "name": "strong",
                "model": "openai/strong",
                "api_base": strong.base_url,
                "priority": 1,
                "description": "a large careful model",
                "price_in": 10.0,
                "price_out": 10.0,
            },
        ],
    )


def _servers(factory: Any) -> tuple[LoopbackServer, LoopbackServer]:
    return factory(), factory()


def _wrong_attempt() -> list[dict[str, Any]]:
    """cheap's attempt: a wrong fix, a stray file, and a confident answer."""
    return [
        {
            **tool_reply(
                call("edit_file", path="calc.py", old_text="a - b", new_text="a * b"),
                call("write_file", path="notes.txt", content="cheap was here\n"),
            ),
            "usage": USAGE,
        },
        {"content": "Fixed add().", "usage": USAGE},
    ]


def _run(repo: Path, pool: Path, *extra: str, fmt: str = "json") -> Any:
    return fugu(
        "-p",
        "fix add() so that test_calc.py passes",
        "--pool",
        str(pool),
        "--output-format",
        fmt,
        "--permission-mode",
        "full-auto",
        *extra,
        cwd=repo,
        timeout=300,
    )


def test_a_failed_check_sets_the_attempt_aside_and_the_strong_worker_fixes_it(
    tmp_path: Path, loopback_factory: object
) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD").strip()
    cheap.script("cheap", _wrong_attempt())
    strong.script(
        "strong",
        [
            # "a - b" is only there if cheap's "a * b" was taken back out of the tree
            {
                **tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
                "usage": USAGE,
            },
            {"content": "add() adds now.", "usage": USAGE},
        ],
    )
    run = _run(repo, _pool(tmp_path, cheap, strong), "--check", CHECK, fmt="stream-json")
    assert run.code == 0, run.stderr

    # the tree ends fixed, with nothing of the failed attempt in it; the user's branch is untouched
    assert (repo / "calc.py").read_text() == FIXED
    assert not (repo / "notes.txt").exists()
    assert subprocess.run(["python3", "test_calc.py"], cwd=repo, capture_output=True).returncode == 0
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert git(repo, "status", "--porcelain", "--untracked-files=all").split("\n")[0].strip() == "M calc.py"

    events = run.events()
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success", result
    attempts = result["attempts"]
    assert [(a["worker"], a["check"], a["evidence"], a["exit_code"]) for a in attempts] == [
        ("cheap", "failed", "check", 1),
        ("strong", "passed", "check", 0),
    ]
    assert all(a["command"] == CHECK and a["steps"] == 2 for a in attempts)
    assert attempts[0]["cost_usd"] > 0 and attempts[1]["cost_usd"] > attempts[0]["cost_usd"]
    assert abs(sum(a["cost_usd"] for a in attempts) - result["total_cost_usd"]) < 1e-9
    assert result["workers"]["cheap"]["steps"] == 2 and result["workers"]["strong"]["steps"] == 2

    # the failed attempt is kept under its ref, whole: its wrong fix and its stray file
    ref = attempts[0]["set_aside"]
    sid = result["session_id"]
    assert ref == f"refs/fugu/checkpoints/{sid}-t1-attempt1-cheap"
    assert git(repo, "show", f"{ref}:calc.py") == WRONG
    assert git(repo, "show", f"{ref}:notes.txt") == "cheap was here\n"
    assert attempts[1]["set_aside"] is None

    # the route line says why each attempt's worker was chosen; the check's events come in between
    routes = [e for e in events if e.get("subtype") == "route"]
    assert [(e["step"], e["worker"]) for e in routes] == [
        (1, "cheap"),
        (2, "cheap"),
        (3, "strong"),
        (4, "strong"),
    ]
    assert routes[0]["reason"].startswith("first attempt")
    assert routes[2]["reason"].startswith("escalates after cheap failed the check")
    checks = [e for e in events if e.get("subtype") == "check"]
    assert [(c["attempt"], c["worker"], c["check"]) for c in checks] == [
        (1, "cheap", "failed"),
        (2, "strong", "passed"),
    ]
    assert "add(2, 3) should be 5" in checks[0]["output"]

    # the strong worker read the failure as evidence
    sent = json.dumps(strong.requests_for("strong")[0].messages)
    assert "check-failed" in sent and CHECK in sent and ref in sent

    shown = fugu("sessions", "show", sid, cwd=repo)
    assert shown.code == 0, shown.stderr
    assert "turn 1 attempt 1: cheap · check failed (exit 1)" in shown.stdout
    assert f"set aside as {ref}" in shown.stdout
    assert "turn 1 attempt 2: strong · check passed (exit 0)" in shown.stdout
    assert "turn 1 step 3: strong (prior, p=" in shown.stdout
    assert "escalates after cheap failed the check" in shown.stdout

    # the exported session carries the attempts, in each of its forms
    exported = fugu("sessions", "export", sid, "--format", "json", cwd=repo)
    assert exported.code == 0, exported.stderr
    (turn,) = json.loads(exported.stdout)["turns"]
    assert [(a["worker"], a["check"], a["set_aside"]) for a in turn["attempts"]] == [
        ("cheap", "failed", ref),
        ("strong", "passed", None),
    ]
    assert [a["cost_usd"] for a in turn["attempts"]] == [a["cost_usd"] for a in attempts]
    markdown = fugu("sessions", "export", sid, "--format", "md", cwd=repo).stdout
    first = f"1. cheap · check failed (exit 1) · ${attempts[0]['cost_usd']:.4f} · set aside as {ref}"
    assert first in markdown
    assert "2. strong · check passed (exit 0)" in markdown
    page = fugu("sessions", "export", sid, "--format", "html", cwd=repo).stdout
    assert "<li>strong · check passed (exit 0)" in page


def test_a_passing_check_ends_the_turn_and_the_strong_worker_is_never_called(
    tmp_path: Path, loopback_factory: object
) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    (repo / "Makefile").write_text(f"test:\n\t{CHECK}\n")  # what --check auto finds
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "make test")
    cheap.script(
        "cheap",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            "Fixed add().",
        ],
    )
    run = _run(repo, _pool(tmp_path, cheap, strong), "--check", "auto")
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["subtype"] == "success" and result["result"] == "Fixed add()."
    assert [(a["worker"], a["check"], a["set_aside"], a["command"]) for a in result["attempts"]] == [
        ("cheap", "passed", None, "make test")
    ]
    assert strong.requests_for("strong") == []
    assert (repo / "calc.py").read_text() == FIXED
    assert "strong" not in result["workers"]


def test_the_budget_spent_stops_the_escalation_with_an_honest_result(
    tmp_path: Path, loopback_factory: object
) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    cheap.script("cheap", _wrong_attempt())
    run = _run(repo, _pool(tmp_path, cheap, strong), "--check", CHECK, "--max-budget-usd", "0.0015")
    assert run.code == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["is_error"] and result["fugu_status"] == "error_max_budget"
    assert "budget limit ($0.0015) after 1 attempt" in result["errors"][0]
    assert "the check failed on cheap" in result["errors"][0]
    assert [(a["worker"], a["check"]) for a in result["attempts"]] == [("cheap", "failed")]
    assert result["total_cost_usd"] >= 0.0015
    assert strong.requests_for("strong") == []
    # the failed attempt is set aside even though nobody tried after it: the tree is as the turn found it
    assert (repo / "calc.py").read_text() == BUGGY and not (repo / "notes.txt").exists()
    assert git(repo, "show", f"{result['attempts'][0]['set_aside']}:calc.py") == WRONG


def test_every_worker_failing_the_check_ends_in_an_error(tmp_path: Path, loopback_factory: object) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    cheap.script("cheap", _wrong_attempt())
    strong.script("strong", ["I could not find the bug."])  # changes nothing: nothing to set aside
    run = _run(repo, _pool(tmp_path, cheap, strong), "--check", CHECK)
    assert run.code == 1, run.stderr
    result = json.loads(run.stdout)
    assert result["fugu_status"] == "error_during_execution"
    assert "no attempt passed the check" in result["errors"][0]
    assert "every worker in the pool made an attempt" in result["errors"][0]
    assert [(a["worker"], a["check"], bool(a["set_aside"])) for a in result["attempts"]] == [
        ("cheap", "failed", True),
        ("strong", "failed", False),
    ]
    assert (repo / "calc.py").read_text() == BUGGY


def test_a_bad_check_is_refused_before_any_worker_is_called(tmp_path: Path, loopback_factory: object) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    pool = _pool(tmp_path, cheap, strong)
    for check, said in (
        ("no-such-checker --all", "'no-such-checker' is not a command here"),
        ("if then fi (", "bash cannot parse it"),
        ("  ", "--check needs a command"),
        ("auto", "--check auto: no test command found"),
    ):
        run = _run(repo, pool, "--check", check)
        assert run.code == 2, (check, run.stdout, run.stderr)
        assert said in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert cheap.requests_for("cheap") == [] and strong.requests_for("strong") == []


def test_the_check_comes_from_config_and_a_workers_own_tests_are_evidence_without_it(
    tmp_path: Path, loopback_factory: object
) -> None:
    cheap, strong = _servers(loopback_factory)
    repo = make_repo(tmp_path / "repo")
    pool = _pool(tmp_path, cheap, strong)
    (repo / "test_unit.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    # without a check: the worker's own last test run is its attempt's evidence, recorded, not acted on
    cheap.script(
        "cheap",
        [
            tool_reply(call("shell", command="python3 -m unittest -q test_unit")),
            "The test fails; add() subtracts.",
        ],
    )
    run = _run(repo, pool)
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    assert [(a["worker"], a["check"], a["evidence"], a["exit_code"]) for a in result["attempts"]] == [
        ("cheap", "failed", "worker-test", 1)
    ]
    assert result["attempts"][0]["command"] == "python3 -m unittest -q test_unit"
    assert strong.requests_for("strong") == []

    # [checks] verify in the user's config judges attempts as --check does
    home = Path(os.environ["FUGU_HOME"])
    (home / "config.toml").write_text(f'[checks]\nverify = "{CHECK}"\n')
    cheap.script(
        "cheap", [tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")), "Done."]
    )
    run = _run(repo, pool)
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    assert [(a["worker"], a["check"], a["evidence"]) for a in result["attempts"]] == [
        ("cheap", "passed", "check")
    ]


def _learned_checkpoint(out: Path) -> Path:
    """Two known workers and a hand-set escalation policy (as tests/router/test_escalate.py): cheap right half
    the time, strong 9 times in 10, each worth less after a failed check."""
    from fugu_cli.router.checkpoint import init_checkpoint
    from fugu_cli.types import Worker

    workers = [
        Worker("cheap", "openai/cheap", price_in=0.1, price_out=0.1),
        Worker("strong", "openai/strong", price_in=10.0, price_out=30.0, priority=1.0),
    ]
    init_checkpoint(out, workers, rank=2)
    meta = json.loads((out / "router.json").read_text())
    meta["escalation"] = {
        "value": [[0.5, 0.9], [0.3, 0.75], [0.2, 0.6]],
        "text": [0.0, 0.0, 0.0],
        "stop": [0.0, 0.0],
        "fail": 0.0,
        "spend": 0.0,
        "look": 1.0,
        "strength": [0.5, 0.9],
        "check_accuracy": 0.9,
    }
    (out / "router.json").write_text(json.dumps(meta))
    return out


def test_the_learned_router_escalates_by_its_policy_and_may_stop(
    tmp_path: Path, loopback_factory: object
) -> None:
    cheap, strong = _servers(loopback_factory)
    pool = write_pool(
        tmp_path / "pool.toml",
        [
            {
                "name": "cheap",
                "model": "openai/cheap",
                "api_base": cheap.base_url,
                "price_in": 0.1,
                "price_out": 0.1,
            },
            {
                **{"name": "strong", "model": "openai/strong", "api_base": strong.base_url},
                **{"price_in": 10.0, "price_out": 30.0, "priority": 1.0},
            },
        ],
    )
    ckpt = _learned_checkpoint(tmp_path / "esc")
    fixing: list[Any] = [
        tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
        "Fixed.",
    ]

    # λ = 10: cheap first, and after its failed check the strong worker is worth its price
    repo = make_repo(tmp_path / "repo")
    cheap.script("cheap", _wrong_attempt())
    strong.script("strong", fixing)
    run = _run(repo, pool, "--check", CHECK, "--router", str(ckpt), "--cost-weight", "10", fmt="stream-json")
    assert run.code == 0, run.stderr
    events = run.events()
    assert [(a["worker"], a["check"]) for a in events[-1]["attempts"]] == [
        ("cheap", "failed"),
        ("strong", "passed"),
    ]
    starts = [e for e in events if e.get("subtype") == "attempt"]
    assert [e["worker"] for e in starts] == ["cheap", "strong"]
    assert starts[1]["reason"].startswith("escalates after cheap failed the check: escalation score")
    assert {e["source"] for e in events if e.get("subtype") == "route"} == {"learned"}
    assert (repo / "calc.py").read_text() == FIXED

    # λ = 100: after cheap fails, no strong attempt is worth its cost: the policy stops, and says why
    repo = make_repo(tmp_path / "repo2")
    cheap.script("cheap", _wrong_attempt())
    before = len(strong.requests_for("strong"))
    run = _run(repo, pool, "--check", CHECK, "--router", str(ckpt), "--cost-weight", "100")
    assert run.code == 1, run.stderr
    result = json.loads(run.stdout)
    assert [(a["worker"], a["check"]) for a in result["attempts"]] == [("cheap", "failed")]
    assert "no further attempt is worth its cost" in result["errors"][0]
    assert len(strong.requests_for("strong")) == before
    assert (repo / "calc.py").read_text() == BUGGY
