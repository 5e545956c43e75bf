"""The GitHub Action's script (action/run_fugu.py) on a recorded pull_request event, with a stand-in `gh` on
PATH that records what it would post and loopback workers: the comment holds the answer and the routing
summary, the session is exported for the artifact, and neither the job's log nor the comment holds the key.

The recorded event's base and head shas (BASE_SHA, HEAD_SHA) are replaced by the commits of the test's own
repository, so the review task carries a real diff."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers import call, git, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "action" / "run_fugu.py"
SECRET = "alpha-secret-0123456789abcdef"
GH = """#!{python}
import json, pathlib, sys
args = sys.argv[1:]
body = pathlib.Path(args[args.index("--body-file") + 1]).read_text()
with open({log!r}, "a") as f:
    f.write(json.dumps({{"args": args, "body": body}}) + "\\n")
print("https://github.com/octo/calc/pull/7#issuecomment-1")
"""


class Job:
    """A job's environment: the checkout, a runner temp folder, `gh` on PATH, the step's outputs."""

    def __init__(self, tmp_path: Path, loopback: LoopbackServer) -> None:
        self.repo = make_repo(tmp_path / "repo")
        self.base = git(self.repo, "rev-parse", "HEAD").strip()
        git(self.repo, "checkout", "-q", "-b", "mul")
        (self.repo / "calc.py").write_text(
            (self.repo / "calc.py").read_text() + "\n\ndef mul(a, b):\n    return a * b\n"
        )
        git(self.repo, "commit", "-qam", "add mul")
        self.head = git(self.repo, "rev-parse", "HEAD").strip()
        self.temp = tmp_path / "runner-temp"
        self.temp.mkdir()
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        self.gh_log = tmp_path / "gh.jsonl"
        gh = bin_dir / "gh"
        gh.write_text(GH.format(python=sys.executable, log=str(self.gh_log)))
        gh.chmod(0o755)
        self.outputs = tmp_path / "outputs.txt"
        self.summary = tmp_path / "summary.md"
        worker = {"name": "alpha", "model": "openai/alpha", "api_base": loopback.base_url}
        pool = write_pool(
            tmp_path / "pool.toml", [worker | {"api_key_env": "ALPHA_API_KEY", "price_in": 3.0}]
        )
        self.env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "GITHUB_REPOSITORY": "octo/calc",
            "GITHUB_OUTPUT": str(self.outputs),
            "GITHUB_STEP_SUMMARY": str(self.summary),
            "RUNNER_TEMP": str(self.temp),
            "FUGU_ACTION_POOL_FILE": str(pool),
            "FUGU_ACTION_PERMISSION_MODE": "read-only",
            "FUGU_ACTION_MAX_BUDGET_USD": "1",
            "ALPHA_API_KEY": SECRET,
            "GH_TOKEN": "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
        }

    def run(self, event_name: str, event: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path = self.temp / "event.json"
        path.write_text(json.dumps(event))
        env = {**self.env, "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(path)}
        return subprocess.run(
            [sys.executable, str(SCRIPT)], cwd=self.repo, env=env, capture_output=True, text=True, timeout=180
        )

    def posted(self) -> list[dict[str, Any]]:
        if not self.gh_log.exists():
            return []
        return [json.loads(line) for line in self.gh_log.read_text().splitlines()]


def _pull_request(job: Job) -> dict[str, Any]:
    text = (Path(__file__).parent / "pull_request.json").read_text()
    event: dict[str, Any] = json.loads(text.replace("BASE_SHA", job.base).replace("HEAD_SHA", job.head))
    return event


def test_a_pull_request_gets_the_answer_and_the_routing_summary_and_no_secret(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    job = Job(tmp_path, loopback)
    loopback.script(
        "alpha",
        [
            tool_reply(call("read_file", path="calc.py")),
            f"mul() looks right, but add() still subtracts. (Key seen: {SECRET})",
        ],
    )
    run = job.run("pull_request", _pull_request(job))
    log = run.stdout + run.stderr
    assert run.returncode == 0, log

    [posted] = job.posted()
    assert posted["args"][:3] == ["pr", "comment", "7"]
    assert posted["args"][-2:] == ["--repo", "octo/calc"]
    body = posted["body"]
    assert "mul() looks right, but add() still subtracts." in body
    assert "Routing: 2 steps · $" in body
    rows = [line for line in body.splitlines() if line.startswith("| ") and "alpha" in line]
    assert len(rows) == 2 and "`read_file`" in rows[0] and "prior" in rows[0]
    assert "Workers: alpha ×2" in body
    assert body.startswith("<!-- fugu-action -->")
    # the secret the worker echoed is blanked in the comment, and nothing of it reaches the log
    assert SECRET not in body and "[ALPHA_API_KEY]" in body
    assert SECRET not in log and "ghs_16C7e42F" not in log
    assert loopback.requests_for("alpha")[0].key_tail == SECRET[-4:]  # the key did reach the worker

    # the review task carried the pull request and its diff
    task = next(m["content"] for m in loopback.requests_for("alpha")[0].messages if m["role"] == "user")
    assert "Review pull request #7: Add a mul() helper" in task
    assert "+def mul(a, b):" in task

    outputs = dict(line.split("=", 1) for line in job.outputs.read_text().splitlines())
    session = json.loads(Path(outputs["session-file"]).read_text())
    assert session["session"]["id"] == outputs["session-id"]
    assert [s["worker"] for t in session["turns"] for s in t["steps"]] == ["alpha", "alpha"]
    assert SECRET not in Path(outputs["session-file"]).read_text()
    assert job.summary.read_text().strip() == body.strip()


def test_a_comment_runs_only_when_it_mentions_fugu_and_is_not_a_bot_s(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    job = Job(tmp_path, loopback)
    loopback.script("alpha", ["calc.py has add() and mul()."])
    issue = {"number": 3, "title": "What is in calc?", "user": {"login": "mona"}}

    def comment(body: str, kind: str = "User") -> dict[str, Any]:
        return {"action": "created", "issue": issue, "comment": {"body": body, "user": {"type": kind}}}

    quiet = job.run("issue_comment", comment("thanks, all clear"))
    assert quiet.returncode == 0 and "nothing to do" in quiet.stderr
    bot = job.run("issue_comment", comment("<!-- fugu-action -->\n@fugu said so", kind="Bot"))
    assert bot.returncode == 0 and job.posted() == []

    run = job.run("issue_comment", comment("@fugu what does calc.py define?"))
    assert run.returncode == 0, run.stderr
    [posted] = job.posted()
    assert posted["args"][:3] == ["issue", "comment", "3"]
    assert "calc.py has add() and mul()." in posted["body"]
    task = next(m["content"] for m in loopback.requests_for("alpha")[0].messages if m["role"] == "user")
    assert task.startswith("what does calc.py define?") and "(On issue #3: What is in calc?)" in task


def test_action_yml_hands_every_input_to_the_script() -> None:
    import yaml

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = {s.get("name", s.get("uses")): s for s in action["runs"]["steps"]}
    run = steps["Run fugu"]
    assert run["run"] == 'python "$ACTION_PATH/action/run_fugu.py"'  # inputs travel in env, never in the line
    script = SCRIPT.read_text()
    passed = {v.split(".", 1)[1].rstrip(" }") for v in run["env"].values() if "inputs." in v}
    assert passed | {"fugu-version", "python-version"} == set(action["inputs"])
    for name in run["env"]:
        if name.startswith("FUGU_ACTION_"):
            assert f'"{name}"' in script, name
    upload = steps["Upload the session"]
    assert upload["with"]["path"] == "${{ steps.run.outputs.session-file }}"
