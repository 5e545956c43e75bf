"""A session with folders added beside the repository (--add-dir at start, /add-dir later): their instruction
files and repo map reach the workers, the tools reach them from the next turn, and /add-dir says so."""

from __future__ import annotations

from pathlib import Path

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.ui.test_commands import Ctx


def _lib(root: Path, name: str, rule: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "AGENTS.md").write_text(rule + "\n")
    (root / "pkg" / "shapes.py").write_text("def circle_area(r):\n    return 3 * r * r\n")
    return root


def _session(tmp_path: Path, llm: ScriptedLLM, *dirs: str) -> Session:
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    opts = RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto", add_dirs=tuple(map(Path, dirs)))
    return build_session(opts, llm=llm)


def test_a_folder_added_at_start_brings_its_instructions_and_map_and_is_edited(tmp_path: Path) -> None:
    lib = _lib(tmp_path / "lib", "lib", "LIB-RULE: lib keeps pi exact.")
    llm = ScriptedLLM(
        [
            tool_reply(
                call("edit_file", path="../lib/pkg/shapes.py", old_text="3 * r", new_text="3.14159 * r")
            ),
            tool_reply(call("shell", command="python3 -c 'import sys; sys.path[:0] = [\"../lib\"]; "
                            "from pkg.shapes import circle_area; print(circle_area(1))'")),
            "circle_area uses pi now.",
        ]
    )  # fmt: skip
    session = _session(tmp_path, llm, "../lib")
    result = session.run_turn("fix circle_area in the lib beside this repo")
    assert result.status == "success", result.result
    assert "3.14159 * r" in (lib / "pkg" / "shapes.py").read_text()
    system = llm.calls[0].messages[0].content or ""
    assert "Instructions from ../lib/AGENTS.md (instructions for the folder ../lib/, added beside" in system
    assert "LIB-RULE: lib keeps pi exact." in system
    context = "\n".join(m.content or "" for m in llm.calls[0].messages)
    assert "Folders added beside the repository, which the tools reach too: ../lib/" in context
    assert "circle_area" in context  # the added folder's repo map
    ran = [m.content or "" for m in llm.calls[-1].messages if m.role == "tool"][-1]
    assert "3.14159" in ran


def test_add_dir_mid_session_opens_the_folder_from_the_next_turn(tmp_path: Path) -> None:
    lib = _lib(tmp_path / "lib", "lib", "LATE-RULE: added later.")
    llm = ScriptedLLM(
        [
            tool_reply(call("read_file", path="../lib/pkg/shapes.py")),
            "could not read it",
            tool_reply(call("read_file", path="../lib/pkg/shapes.py")),
            "it computes 3 * r * r",
        ]
    )
    session = _session(tmp_path, llm)
    session.run_turn("read the lib")
    refused = [m.content or "" for m in llm.calls[-1].messages if m.role == "tool"][-1]
    assert "outside the repository" in refused
    ctx = Ctx(session)
    said = " ".join(ctx.run("/add-dir ../lib").split())
    assert f"added {lib.resolve()}: readable and, as the repository, editable by the tools" in said
    listed = " ".join(ctx.run("/add-dir").split())  # the console may wrap a long path
    assert listed == f"folders beside the repository: {lib.resolve()}"
    assert "no such folder" in ctx.run("/add-dir ../missing")
    assert "inside the repository" in ctx.run("/add-dir .")
    session.run_turn("read the lib again")
    read = [m.content or "" for m in llm.calls[-1].messages if m.role == "tool"][-1]
    assert "return 3 * r * r" in read
    assert "LATE-RULE: added later." in read  # its instructions come with the first call that reaches it
