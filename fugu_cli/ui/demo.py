"""`fugu demo`: replay a recorded multi-worker session offline, in a throwaway git repository.

Only the models' words are scripted (fugu_cli/data/demo.json); the router, tools, git and the ledger are real.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any


def load_demo() -> dict[str, Any]:
    text = resources.files("fugu_cli").joinpath("data/demo.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _git(root: Path, *args: str, write: bool = True) -> str:
    from fugu_cli.tools.gitrun import git

    return git(root, *args, write=write).stdout


def make_repo(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (root / name).write_text(content)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.email=demo@fugu", "-c", "user.name=fugu demo", "commit", "-q", "-m", "demo repo")


def write_pool(path: Path, workers: list[dict[str, Any]]) -> None:
    lines: list[str] = []
    for w in workers:
        lines.append("[[workers]]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in w.items())
        lines.append("")
    path.write_text("\n".join(lines))


def main(router: str | None, keep: bool) -> int:
    from fugu_cli.app import assemble, resolve
    from fugu_cli.calls import WorkerHealth
    from fugu_cli.llm.scripted import ScriptedLLM
    from fugu_cli.options import RunOptions
    from fugu_cli.ui.render import Renderer, make_console

    demo = load_demo()
    tmp = Path(tempfile.mkdtemp(prefix="fugu-demo-"))
    repo = tmp / "repo"
    repo.mkdir()
    make_repo(repo, demo["files"])
    write_pool(tmp / "pool.toml", demo["workers"])
    opts = RunOptions(cwd=repo, pool=str(tmp / "pool.toml"), permission_mode="full-auto", router=router)
    resolved = resolve(opts)
    # the demo's scripted failure is not the user's worker's: its health stays out of FUGU_HOME
    resolved = dataclasses.replace(resolved, health=WorkerHealth(resolved.health.settings))
    session = assemble(resolved, opts, llm=ScriptedLLM(demo["replies"]))
    print(f"fugu demo: a recorded session replayed in {repo} (only the models' words are scripted)")
    print(f"task: {demo['task']}\n")
    result = session.run_turn(demo["task"], Renderer(make_console(), compact=True).on_event)
    print(f"\n{result.result}\n")
    diff = _git(repo, "diff", "--no-ext-diff", "--no-textconv", write=False)
    print(diff)
    print(f"see who did what: fugu sessions show {result.session_id}")
    if not keep:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if result.status == "success" else 1
