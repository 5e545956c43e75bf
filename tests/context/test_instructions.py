"""Layered instruction files: the user's, the repository root's, then each folder's the session works in, in
that order and within the stated budget; `/memory` lists what was loaded, cut or skipped."""

from __future__ import annotations

import io
import os
from pathlib import Path

from rich.console import Console

from fugu_cli.app import RunOptions, build_session
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.session import Session
from fugu_cli.ui import commands
from tests.helpers import call, make_repo, tool_reply, write_pool

USER = "USER-LEVEL: indent with tabs."  # 29 characters: 8 tokens
ROOT = "ROOT-LEVEL: run make test before you answer."  # 44 characters: 11 tokens
PKG = "PKG-LEVEL: pkg is frozen, never edit it. " * 4  # 164 characters: 41 tokens
DEEP = "DEEP-LEVEL: sub has its own rules."


def _session(tmp_path: Path, llm: ScriptedLLM, cwd: Path, budget: int | None = None) -> Session:
    home = Path(os.environ["FUGU_HOME"])
    (home / "AGENTS.md").write_text(USER + "\n")  # beside the user config (FUGU_HOME moves it there)
    if budget is not None:
        (home / "config.toml").write_text(f"[context]\ninstructions_tokens = {budget}\n")
    pool = write_pool(tmp_path / "pool.toml", [{"name": "solo", "model": "openai/solo"}])
    return build_session(RunOptions(cwd=cwd, pool=str(pool), permission_mode="full-auto"), llm=llm)


def _repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / "AGENTS.md").write_text(ROOT + "\n")
    (repo / "CLAUDE.md").write_text("ROOT-CLAUDE: never read: AGENTS.md wins in the same folder.\n")
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "CLAUDE.md").write_text(PKG + "\n")
    (repo / "pkg" / "sub" / "AGENTS.md").write_text(DEEP + "\n")
    (repo / "lib").mkdir()
    (repo / "lib" / "AGENTS.md").write_text("LIB-LEVEL: lib uses snake_case.\n")
    (repo / "lib" / "util.py").write_text("def f():\n    return 1\n")
    return repo


def _memory(session: Session) -> str:
    out = io.StringIO()

    class Ctx:
        console = Console(file=out, width=120, force_terminal=False)

        def __init__(self) -> None:
            self.session = session

    assert commands.dispatch(Ctx(), "/memory")  # type: ignore[arg-type]
    return out.getvalue()


def test_three_levels_in_order_within_the_budget(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    llm = ScriptedLLM(["ok"])
    session = _session(tmp_path, llm, repo / "pkg" / "sub", budget=40)  # 8 + 11 leave 21 for pkg's 41
    session.run_turn("hello")
    system = llm.calls[0].messages[0].content or ""
    at = [system.index(marker) for marker in ("USER-LEVEL", "ROOT-LEVEL", "PKG-LEVEL")]
    assert at == sorted(at)  # the user's, the root's, then the folder's
    assert "ROOT-CLAUDE" not in system  # one file per folder: AGENTS.md before CLAUDE.md
    assert system.count("PKG-LEVEL") == 2  # cut: 21 tokens (84 characters) of 164
    assert "[... cut: the instruction files' budget is spent]" in system
    assert "DEEP-LEVEL" not in system  # nothing left for the deepest folder
    files = session.deps.instructions.files if session.deps.instructions else []
    assert [(f.label, f.level, f.state) for f in files] == [
        (str(Path(os.environ["FUGU_HOME"]) / "AGENTS.md"), "user", "loaded"),
        ("AGENTS.md", "root", "loaded"),
        ("pkg/CLAUDE.md", "folder", "cut to fit the budget"),
        ("pkg/sub/AGENTS.md", "folder", "skipped: over the budget"),
    ]
    assert sum(f.used for f in files) == 40
    shown = _memory(session)
    assert "40 of 40 tokens" in shown
    assert shown.index("AGENTS.md  root") < shown.index("pkg/CLAUDE.md  folder, 41 tokens, cut")
    assert "pkg/sub/AGENTS.md  folder, 9 tokens, skipped: over the budget" in shown


def test_a_folder_a_tool_reaches_brings_its_instructions_once(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    llm = ScriptedLLM(
        [
            tool_reply(call("read_file", path="lib/util.py")),
            tool_reply(call("read_file", path="lib/util.py")),
            "read it",
        ]
    )
    session = _session(tmp_path, llm, repo)
    session.run_turn("look at lib")
    system = llm.calls[0].messages[0].content or ""
    assert "ROOT-LEVEL" in system and "LIB-LEVEL" not in system and "PKG-LEVEL" not in system
    first, second = [m.content or "" for m in llm.calls[-1].messages if m.role == "tool"]
    assert first.endswith(
        "Instructions from lib/AGENTS.md (instructions for the files under lib/):\n"
        "LIB-LEVEL: lib uses snake_case."
    )
    assert "LIB-LEVEL" not in second
    assert "lib/AGENTS.md  folder" in _memory(session)
