"""The GitHub Action's work (action.yml runs this): read the event, run fugu on it, post the answer and the
per-step routing summary (who did what, why, at what cost) as a comment with `gh`, and export the session
for the artifact upload.

Events: a pull request (opened, synchronize, reopened: a review of its diff), and an issue, an issue or PR
comment or a PR review comment that mentions the trigger (`@fugu` by default: the text after it is the
task). Inputs arrive as FUGU_ACTION_* environment variables, never spliced into a shell. Everything this
prints or posts is redacted with fugu's redactor, so no key the job holds reaches its log or the comment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fugu_cli.redact import redact

MARKER = "<!-- fugu-action -->"  # marks fugu's own comments, which never trigger it again
DIFF_CHARS = 60_000  # of a pull request's diff given in the task; the workers can read the rest


@dataclass(frozen=True)
class Target:
    """What the event asks: the task, and the issue or pull request the answer goes to."""

    number: int
    is_pull: bool
    task: str
    where: str  # "pull request #7", for the log


def main() -> int:
    env = os.environ
    event_name = env.get("GITHUB_EVENT_NAME", "")
    try:
        event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError) as e:
        say(f"cannot read the event (GITHUB_EVENT_PATH): {e}")
        return 2
    target = target_of(event_name, event, env)
    if target is None:
        say(f"nothing to do for this {event_name or 'unknown'} event")
        return 0
    say(
        f"running on {target.where} (permission mode {env.get('FUGU_ACTION_PERMISSION_MODE') or 'read-only'})"
    )
    code, events, log = run_fugu(target.task, env)
    for line in log.splitlines():
        say(line.removeprefix("fugu: "))
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    body = comment(result, events, code)
    post(target, body, env)
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(body + "\n")
    if result is not None:
        export_session(str(result.get("session_id", "")), env)
    return 0 if code == 0 else 1


def say(text: str) -> None:
    print(f"fugu-action: {redact(text)}", file=sys.stderr, flush=True)


def target_of(name: str, event: dict[str, Any], env: os._Environ[str] | dict[str, str]) -> Target | None:
    trigger = env.get("FUGU_ACTION_TRIGGER") or "@fugu"
    given = (env.get("FUGU_ACTION_TASK") or "").strip()
    if name in ("pull_request", "pull_request_target"):
        pr = event.get("pull_request") or {}
        if event.get("action") not in (None, "opened", "synchronize", "reopened", "ready_for_review"):
            return None
        task = given or review_task(pr, env)
        return Target(int(pr["number"]), True, task, f"pull request #{pr['number']}")
    if name in ("issue_comment", "pull_request_review_comment", "issues"):
        if event.get("action") not in (None, "created", "opened", "edited"):
            return None
        item = event.get("comment") or event.get("issue") or {}
        text = str(item.get("body") or "")
        if trigger not in text or MARKER in text or (item.get("user") or {}).get("type") == "Bot":
            return None
        issue = event.get("issue") or event.get("pull_request") or {}
        is_pull = name == "pull_request_review_comment" or "pull_request" in issue
        asked = text.split(trigger, 1)[1].strip() or "help with this"
        kind = "pull request" if is_pull else "issue"
        context = f"(On {kind} #{issue['number']}: {issue.get('title', '')})"
        task = f"{given}\n\n{asked}" if given else asked
        return Target(int(issue["number"]), is_pull, f"{task}\n\n{context}", f"{kind} #{issue['number']}")
    return None


def review_task(pr: dict[str, Any], env: os._Environ[str] | dict[str, str]) -> str:
    """The default task for a pull request: review its diff (against its base) for bugs and risks."""
    base, head = (pr.get("base") or {}).get("sha"), (pr.get("head") or {}).get("sha")
    diff = ""
    if base and head:
        from fugu_cli.tools.gitrun import (
            GitError,
            git,
        )  # the hardened git: the checkout's config runs nothing

        try:
            run = git(Path.cwd(), "diff", "--no-ext-diff", "--no-textconv", f"{base}...{head}", check=False)
            diff = run.stdout if run.returncode == 0 else ""
        except GitError:
            diff = ""
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + "\n[... the rest of the diff is cut; read the files for it]\n"
    shown = f"```diff\n{diff}```" if diff else "(the diff could not be computed here: compare with the base)"
    return (
        f"Review pull request #{pr['number']}: {pr.get('title', '')}\n\n{pr.get('body') or ''}\n\n"
        "The change is checked out in this repository. Point out bugs, risks and missing tests, citing "
        f"files and lines; say briefly what is fine. Its diff:\n\n{shown}"
    )


def run_fugu(task: str, env: os._Environ[str] | dict[str, str]) -> tuple[int, list[dict[str, Any]], str]:
    """fugu -p on the task (given on stdin): its exit code, its stream-json events and its stderr."""
    args = [sys.executable, "-m", "fugu_cli", "-p", "--output-format", "stream-json", "--verbose"]
    args += ["--permission-mode", env.get("FUGU_ACTION_PERMISSION_MODE") or "read-only"]
    for flag, name in (
        ("--max-budget-usd", "FUGU_ACTION_MAX_BUDGET_USD"),
        ("--pool", "FUGU_ACTION_POOL_FILE"),
    ):
        if env.get(name):
            args += [flag, str(env[name])]
    if env.get("FUGU_ACTION_ROUTER"):
        args += ["--router", str(env["FUGU_ACTION_ROUTER"])]
    if env.get("FUGU_ACTION_MAX_TURNS"):
        args += ["--max-turns", str(env["FUGU_ACTION_MAX_TURNS"])]
    run = subprocess.run(args, input=task, capture_output=True, text=True, check=False)
    events = []
    for line in run.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return run.returncode, events, run.stderr


def comment(result: dict[str, Any] | None, events: list[dict[str, Any]], code: int) -> str:
    """The comment: the answer, then who did each step, why, with which tools, at what cost."""
    if result is None:
        answer = f"fugu did not finish (exit code {code}); the job's log says why."
    elif result.get("is_error"):
        answer = f"fugu stopped: {'; '.join(result.get('errors') or [result.get('fugu_status', 'error')])}"
    else:
        answer = str(result.get("result") or "")
    rows = routing_rows(events)
    total = float(result.get("total_cost_usd", 0.0)) if result else 0.0
    sid = result.get("session_id", "") if result else ""
    steps = f"{len(rows)} step" + ("" if len(rows) == 1 else "s")
    lines = [MARKER, "### fugu", "", answer.strip(), "", "<details><summary>Routing: "]
    lines[-1] += f"{steps} · ${total:.4f} · session <code>{sid}</code></summary>\n"
    lines += ["| step | worker | why | tools | cost |", "|---:|---|---|---|---:|"]
    lines += [f"| {r['step']} | {r['worker']} | {r['why']} | {r['tools']} | ${r['cost']:.4f} |" for r in rows]
    workers = (result or {}).get("workers") or {}
    if workers:
        who = ", ".join(f"{n} ×{w['steps']} (${w['cost_usd']:.4f})" for n, w in workers.items())
        lines += ["", f"Workers: {who}"]
    lines += ["", "</details>"]
    return redact("\n".join(lines))


def routing_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per step that ran: its route decision, and the reply's tools and cost."""
    routes: dict[int, dict[str, Any]] = {}
    rows = []
    for e in events:
        if e.get("type") == "system" and e.get("subtype") == "route":
            routes[int(e["step"])] = e
        elif e.get("type") == "assistant" and "step" in e:
            route = routes.get(int(e["step"]), {})
            p = (route.get("scores") or {}).get(e.get("worker"))
            why = str(route.get("source", "")) + (f", p={p:.2f}" if p is not None else "")
            if route.get("reason"):
                why += f" ({route['reason']})"
            content = (e.get("message") or {}).get("content") or []
            tools = ", ".join(f"`{b['name']}`" for b in content if b.get("type") == "tool_use") or "–"
            cost = float(((e.get("message") or {}).get("usage") or {}).get("cost_usd", 0.0))
            rows.append(
                {
                    "step": e["step"],
                    "worker": e.get("worker"),
                    "why": _cell(why),
                    "tools": tools,
                    "cost": cost,
                }
            )
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def post(target: Target, body: str, env: os._Environ[str] | dict[str, str]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as f:
        f.write(body)
    kind = "pr" if target.is_pull else "issue"
    args = ["gh", kind, "comment", str(target.number), "--body-file", f.name]
    if env.get("GITHUB_REPOSITORY"):
        args += ["--repo", str(env["GITHUB_REPOSITORY"])]
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        say(f"gh could not post the comment: {run.stderr.strip()}")
    else:
        say(f"posted {run.stdout.strip() or 'the comment'}")
    os.unlink(f.name)


def export_session(sid: str, env: os._Environ[str] | dict[str, str]) -> None:
    """The session as JSON beside the job (RUNNER_TEMP), named in the step's outputs for the upload."""
    if not sid:
        return
    out = Path(env.get("RUNNER_TEMP") or tempfile.gettempdir()) / f"fugu-session-{sid}.json"
    args = [sys.executable, "-m", "fugu_cli", "sessions", "export", sid, "--format", "json", "-o", str(out)]
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        say(f"could not export session {sid}: {run.stderr.strip()}")
        return
    outputs = env.get("GITHUB_OUTPUT")
    if outputs:
        with open(outputs, "a", encoding="utf-8") as f:
            f.write(f"session-id={sid}\nsession-file={out}\n")


if __name__ == "__main__":
    sys.exit(main())
