"""OpenAI's Codex CLI (npm `@openai/codex`, its native binary from the package's platform dependency) with
`fugu serve` as its model provider (`wire_api = "responses"`): `codex exec` fixes a failing test, its tool
calls routed by fugu to loopback workers whose words are scripted; and with model `fugu-agent`, fugu's own
agent does the work while Codex sends its tools. Slow: the first run downloads Codex (about 430 MB)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.npm_kit import CODEX, installed
from tests.serve_kit import KEY, Serve, pool_file, rows

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def codex() -> Path:
    modules, why = installed("codex", [CODEX])
    if modules is None:
        pytest.skip(f"npm could not install {CODEX}: {why}")
    binary = modules / ".bin" / "codex"
    try:
        done = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        pytest.skip(f"{CODEX} has no native binary that runs here: {e}")
    if done.returncode != 0:
        pytest.skip(
            f"{CODEX}'s native binary does not run here: {(done.stderr or done.stdout).strip()[-300:]}"
        )
    assert done.stdout.startswith("codex-cli 0.171.0"), done.stdout
    return binary


def _run_codex(
    codex: Path, repo: Path, home: Path, url: str, model: str, task: str
) -> subprocess.CompletedProcess[str]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "fugu"\n'
        "[model_providers.fugu]\n"
        f'name = "fugu"\nbase_url = "{url}"\nwire_api = "responses"\nenv_key = "FUGU_SERVE_TEST_KEY"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEX"))}
    env |= {"CODEX_HOME": str(home), "FUGU_SERVE_TEST_KEY": KEY}
    argv = [str(codex), "exec", "--skip-git-repo-check", "--sandbox", "workspace-write", task]
    return subprocess.run(
        argv, cwd=repo, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )


def test_codex_exec_fixes_a_failing_test_through_fugu(
    codex: Path, tmp_path: Path, loopback_factory: object, serve: Serve
) -> None:
    a: LoopbackServer = loopback_factory()  # type: ignore[operator]
    b: LoopbackServer = loopback_factory()  # type: ignore[operator]
    a.script("alpha", [tool_reply(call("exec_command", cmd="python3 test_calc.py"))] + [{"fault": 500}] * 4)
    b.script(
        "beta",
        [
            tool_reply(call("exec_command", cmd="sed -i 's/a - b/a + b/' calc.py")),
            tool_reply(call("exec_command", cmd="python3 test_calc.py")),
            "Fixed: add() subtracted; test_calc.py passes now.",
        ],
    )
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")
    workers = [
        {"name": "alpha", "model": "openai/alpha", "api_base": a.base_url, "priority": 2, "price_in": 1.0},
        {"name": "beta", "model": "openai/beta", "api_base": b.base_url, "priority": 1, "price_in": 0.5},
    ]
    pool = write_pool(tmp_path / "pool.toml", workers)
    repo = make_repo(tmp_path / "repo")
    server = serve(pool, api_key=KEY)
    done = _run_codex(codex, repo, tmp_path / "codex-home", server.url, "fugu", "fix the failing test")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "a + b" in (repo / "calc.py").read_text()
    assert subprocess.run(["python3", "test_calc.py"], cwd=repo).returncode == 0
    assert "Fixed: add() subtracted" in done.stdout
    # Codex's calls went through fugu: the test's failure came back to the worker as a tool result
    second = b.requests_for("beta")[0].body["messages"]
    assert any(m["role"] == "tool" and "should be 5" in m["content"] for m in second)
    sessions = rows("SELECT id FROM sessions WHERE mode='pass'")
    assert len(sessions) == 1, sessions  # one Codex thread, one fugu session
    steps = rows("SELECT worker, source, status FROM steps WHERE session_id=? ORDER BY rowid", sessions[0][0])
    assert [w for w, _, s in steps if s == "ok"] == ["alpha", "beta", "beta", "beta"]
    assert ("alpha", "provider_error") in [(w, s) for w, _, s in steps]  # alpha failed, beta took over
    notes = {r[0] for r in rows("SELECT text FROM notes WHERE session_id=?", sessions[0][0])}
    assert any(n.startswith("client_metadata") for n in notes) and any(
        "encrypted_content" in n for n in notes
    )


def test_codex_reaches_fugus_agent_with_model_fugu_agent(
    codex: Path, tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script(
        "alpha",
        [
            tool_reply(call("shell", command="python3 test_calc.py")),
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            tool_reply(call("shell", command="python3 test_calc.py")),
            "Fixed calc.add; the test passes.",
        ],
    )
    repo = make_repo(tmp_path / "repo")
    server = serve(pool_file(tmp_path, loopback, "alpha"), permission_mode="full-auto")
    done = _run_codex(codex, repo, tmp_path / "codex-home", server.url, "fugu-agent", "fix the failing test")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Fixed calc.add" in done.stdout
    assert subprocess.run(["python3", "test_calc.py"], cwd=repo).returncode == 0
    offered = {t["function"]["name"] for t in loopback.requests_for("alpha")[0].body["tools"]}
    assert "edit_file" in offered and "exec_command" not in offered  # fugu's tools, never Codex's
    sid = rows("SELECT id FROM sessions WHERE mode != 'pass'")[0][0]
    tools = [r[0] for r in rows("SELECT tool FROM tool_calls WHERE session_id=? ORDER BY rowid", sid)]
    assert tools == ["shell", "edit_file", "shell"]
    assert rows(
        "SELECT count(*) FROM notes WHERE session_id=? AND text LIKE 'tools:%exec_command%'", sid
    ) == [(1,)]
