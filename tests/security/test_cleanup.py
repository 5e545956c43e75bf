"""What runs leave behind is cleaned up: old sessions' /undo checkpoint refs are pruned."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.tools import checkpoints
from tests.helpers import call, git, make_repo, tool_reply, write_pool


def test_checkpoint_refs_of_older_sessions_are_pruned(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[tools]\nkeep_checkpoint_sessions = 2\n")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "a", "model": "openai/a"}])
    sessions = []
    for n in range(3):
        llm = ScriptedLLM([tool_reply(call("write_file", path=f"f{n}.txt", content="x")), "done"])
        session = build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto"), llm=llm)
        assert session.run_turn(f"write f{n}").status == "success"
        sessions.append(session.id)
        _redate(repo, session.id, int(time.time()) - 100 + n)  # in the order they ran, a second apart
    store = checkpoints.store_path(repo)  # /undo's checkpoints live in fugu's store, not the repository
    refs = git(store, "for-each-ref", "--format=%(refname)", "refs/fugu/checkpoints/").split()
    owners = {sid for sid in sessions if any(sid in r for r in refs)}
    assert owners == set(sessions[1:])  # the oldest session's refs went; the two newest kept
    assert sessions[-1] in " ".join(refs)
    assert git(repo, "for-each-ref", "refs/fugu/") == ""


def _redate(repo: Path, sid: str, when: int) -> None:
    """Give a session's checkpoints (in fugu's store) the commit time `when`: sessions are ranked by their
    checkpoints' commit times, which git keeps in whole seconds, and these three ran within one."""
    store = checkpoints.store_path(repo)
    refs = git(store, "for-each-ref", "--format=%(refname)", f"refs/fugu/checkpoints/{sid}*").split()
    assert refs
    env = {**os.environ, "GIT_COMMITTER_DATE": f"@{when} +0000"}
    for ref in refs:
        tree = git(store, "rev-parse", f"{ref}^{{tree}}").strip()
        commit = subprocess.run(
            ["git", "commit-tree", tree, "-m", "checkpoint"],
            cwd=store, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        git(store, "update-ref", ref, commit)
