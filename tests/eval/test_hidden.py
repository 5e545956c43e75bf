"""Hidden check files: absent from the task's repo for the whole turn, written over whatever the worker left
at their paths (inside the repo only), and the only thing the check reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fugu_cli.app import RunOptions
from fugu_cli.errors import UsageError
from fugu_cli.eval import load_suite, run_suite
from fugu_cli.eval.suite import make_task_repo, prepare_check, run_check, select_tasks
from fugu_cli.llm.scripted import ScriptedLLM
from fugu_cli.store import Store
from tests.eval.kit import SEQ_BUGGY, SEQ_FIXED, SEQ_TEST, write_suite
from tests.helpers import call, tool_reply, write_pool


def test_the_worker_never_sees_the_hidden_test_and_cannot_fake_it(tmp_path: Path) -> None:
    suite = select_tasks(load_suite(write_suite(tmp_path / "mini")), ["first-*"])
    pool = write_pool(tmp_path / "pool.toml", [{"name": "w", "model": "openai/w"}])
    peek = tool_reply(call("read_file", path="test_seq.py"), call("shell", command="ls -a"))
    cheat = tool_reply(call("write_file", path="test_seq.py", content="print('ok')\n"))
    honest = tool_reply(call("write_file", path="seq.py", content=SEQ_FIXED))
    llm = ScriptedLLM({"w": [peek, cheat, "passes now", peek, honest, "fixed"]})
    store = Store(tmp_path / "fugu.db")
    report = run_suite(
        suite,
        RunOptions(cwd=tmp_path, pool=str(pool)),
        workers=["w"],
        repeats=2,
        parallel=1,
        llm=llm,
        store=store,
    )
    assert [(r.repeat, r.reward) for r in report.records] == [(0, 0.0), (1, 1.0)]
    assert "first_n(3)" in report.records[0].check_output  # the hidden assert failed, not the fake test
    results = [
        r["result"] for r in store.query("SELECT result FROM tool_calls WHERE tool IN ('read_file', 'shell')")
    ]
    assert len(results) == 4 and all("test_seq.py" not in r or "not" in r.lower() for r in results)
    listings = [r for r in results if "seq.py" in r and "test_seq" not in r]
    assert listings, results  # `ls -a` listed the repo: seq.py, and no test_seq.py
    seen = " ".join(m.content or "" for c in llm.calls for m in c.messages)
    assert len(llm.calls) == 6 and "first_n(3) == [1, 2, 3]" not in seen


CHECK = "import sys\nsys.path.insert(0, '.')\n" + SEQ_TEST


def test_hidden_files_replace_what_is_in_their_way_and_stay_in_the_repo(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "suite.toml").write_text(
        '[[tasks]]\nid = "t"\nprompt = "p"\ncheck = "python3 tests/check.py"\n'
        f'files = {{ "seq.py" = {json.dumps(SEQ_BUGGY)} }}\n'
        f'hidden = {{ "tests/check.py" = {json.dumps(CHECK)} }}\n'
    )
    (task,) = load_suite(tmp_path / "s").tasks
    repo = make_task_repo(task, tmp_path / "repo")
    assert not (repo / "tests").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "tests").symlink_to(outside)  # a worker's trap: the hidden file would land outside the repo
    (repo / "seq.py").write_text(SEQ_FIXED)
    prepare_check(task, repo)
    assert list(outside.iterdir()) == [] and (repo / "tests").is_dir() and not (repo / "tests").is_symlink()
    assert run_check(task, repo).passed
    (repo / "tests" / "check.py").unlink()
    (repo / "tests" / "check.py").mkdir()  # a folder where the file goes
    prepare_check(task, repo)
    assert (repo / "tests" / "check.py").is_file() and run_check(task, repo).passed


def test_select_tasks_by_glob(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "mini"))
    assert [t.id for t in select_tasks(suite, []).tasks] == ["add", "first-n"]
    assert [t.id for t in select_tasks(suite, ["f*", "nothing"]).tasks] == ["first-n"]
    with pytest.raises(UsageError, match="no task of mini matches"):
        select_tasks(suite, ["z*"])


def test_a_protected_file_turned_into_a_symlink_is_restored_in_the_repo(tmp_path: Path) -> None:
    suite = load_suite(write_suite(tmp_path / "mini"))
    task = suite.tasks[0]  # "add": test_calc.py is protected
    repo = make_task_repo(task, tmp_path / "repo")
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    (repo / "test_calc.py").unlink()
    (repo / "test_calc.py").symlink_to(victim)
    prepare_check(task, repo)
    assert victim.read_text() == "the user's file\n"
    assert (
        not (repo / "test_calc.py").is_symlink()
        and "assert add(2, 3) == 5" in (repo / "test_calc.py").read_text()
    )
