"""Issue 22, "done when": a full-auto run whose model (a scripted one, on loopback, reached through litellm)
tries every `.git` attack through its shell calls, commits through fugu's git tool, then deletes every ref,
runs `git gc`, deletes the objects and the tree. The user's next git runs nothing planted, and /undo puts
the user's uncommitted work back."""

from __future__ import annotations

from pathlib import Path

from fugu_cli.app import RunOptions, build_session
from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.security.test_attack_git_dir import ATTACKS, attack, fired, the_users_git

DESTROY = (
    "git for-each-ref --format='%(refname)' | xargs -n1 git update-ref -d; "
    "git reflog expire --expire=now --all; git gc -q --prune=now; "
    "rm -rf .git/objects/?? .git/objects/pack/* ./*"
)


def test_after_a_hostile_full_auto_run_nothing_planted_runs_and_undo_restores(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = make_repo(tmp_path / "repo")
    (repo / "calc.py").write_text("# the user's uncommitted work\ndef add(a, b):\n    return a + b\n")
    (repo / "notes.txt").write_text("an untracked note of the user's\n")
    before = {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()}
    shells = [call("shell", command=attack(name, markers)) for name in sorted(ATTACKS)]
    loopback.script(
        "hostile",
        [
            tool_reply(call("write_file", path="pwn.txt", content="first edit: the turn's checkpoint\n")),
            tool_reply(*shells),
            tool_reply(call("git_status"), call("git_commit", message="the model's commit")),
            tool_reply(call("shell", command=DESTROY)),
            "All done.",
        ],
    )
    pool = write_pool(
        tmp_path / "pool.toml",
        [{"name": "hostile", "model": "openai/hostile", "api_base": loopback.base_url}],
    )
    session = build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto"))
    try:
        result = session.run_turn("tidy up the repository")
        assert result.status == "success", result.error
        results = [m.content or "" for m in session.messages if m.role == "tool"]
        assert any("was dropped" in r for r in results)  # the sandbox said what it undid
        assert not (repo / "calc.py").exists()  # the tree is gone
        the_users_git(repo)
        restored = session.undo()
    finally:
        session.close()
    assert "calc.py" in restored and "notes.txt" in restored
    after = {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()}
    assert after == before
    assert fired(markers) == []
