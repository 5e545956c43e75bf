"""The agent's senses through the real CLI (`fugu -p`, and the REPL in a pty) against loopback servers: a web
page reaches the model as Markdown, the user is asked for a host in ask mode, a picture goes to the worker
that sees, an edit that breaks ruff comes back with the diagnostic, and --add-dir opens one sibling folder."""

from __future__ import annotations

import base64
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from tests.helpers import call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.web_kit import PageServer

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def user_config(text: str) -> None:
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text(text)


def pool(tmp_path: Path, server: LoopbackServer, *workers: dict[str, Any]) -> str:
    return str(
        write_pool(
            tmp_path / "pool.toml",
            [{"api_base": server.base_url, "model": f"openai/{w['name']}", **w} for w in workers],
        )
    )


def tool_messages(server: LoopbackServer, model: str) -> list[str]:
    return [m["content"] for m in server.requests_for(model)[-1].messages if m["role"] == "tool"]


def test_a_fetched_page_reaches_the_model_as_markdown_and_a_denied_host_is_refused(
    tmp_path: Path, loopback: LoopbackServer, pages: PageServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    page = pages.html("/docs", "<html><title>API</title><body><h2>add(a, b)</h2><p>Returns <b>a + b</b>.</p>")
    hop = pages.redirect("/go", pages.url("/docs", host="localhost"))
    user_config('[web]\nallow = ["127.0.0.1"]\ndeny = ["localhost"]\n')
    loopback.script(
        "solo",
        [
            tool_reply(call("web_fetch", url=page, prompt="what add returns")),
            tool_reply(call("web_fetch", url=hop)),
            "add returns the sum.",
        ],
    )
    run = fugu("-p", "read the docs of add", "--pool", pool(tmp_path, loopback, {"name": "solo"}), cwd=repo)
    assert run.code == 0, run.stderr
    fetched, refused = tool_messages(loopback, "solo")
    assert fetched.startswith(f'<web-page url="{page}" status="200" type="text/html">')
    assert "## add(a, b)\n\nReturns **a + b**." in fetched and "Untrusted content" in fetched
    assert "Permission denied: localhost" in refused and "[web] deny" in refused
    assert pages.paths() == ["/docs", "/go"]
    tools = [t["function"]["name"] for t in loopback.requests_for("solo")[0].body["tools"]]
    assert "web_fetch" in tools and "web_search" not in tools


def test_image_flag_and_a_mentioned_picture_go_to_the_worker_that_sees(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "shot.png").write_bytes(PNG)
    (tmp_path / "extra.png").write_bytes(PNG[:-1] + b"\x83")  # a second picture (its last byte differs)
    workers = ({"name": "blind", "priority": 2}, {"name": "seer", "priority": 1, "vision": True})
    loopback.script("seer", ["Two screenshots of one dot."])
    run = fugu(
        "-p", "compare @shot.png with the other", "--image", str(tmp_path / "extra.png"),
        "--pool", pool(tmp_path, loopback, *workers), "--output-format", "stream-json",
        cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert loopback.requests_for("blind") == []
    task = loopback.requests_for("seer")[0].messages[-1]["content"]
    kinds = [part["type"] for part in task]
    assert kinds == ["text", "image_url", "image_url"]
    assert (
        f"[image: {tmp_path / 'extra.png'} (image/png, 1 kB)] [image: shot.png (image/png, 1 kB)]"
        in task[0]["text"]
    )
    route = next(e for e in run.events() if e.get("subtype") == "route")
    assert route["worker"] == "seer" and "blind cannot see images" in route["reason"]

    only_blind = fugu(
        "-p", "what is this", "--image", "shot.png", "--pool", pool(tmp_path, loopback, workers[0]), cwd=repo
    )
    assert only_blind.code == 1
    assert "no worker in the pool can see images (blind)" in only_blind.stderr
    missing = fugu("-p", "x", "--image", "nope.png", "--pool", pool(tmp_path, loopback, workers[0]), cwd=repo)
    assert (
        missing.code == 2
        and missing.stderr.count("\n") == 1
        and "--image nope.png: cannot read" in missing.stderr
    )
    assert loopback.requests_for("blind") == []


def test_an_edit_that_breaks_ruff_comes_back_and_the_next_step_sees_it(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".fugu").mkdir()
    python = shlex.quote(sys.executable)
    ruff = f"{python} -m ruff check --no-cache --isolated --output-format concise {{files}}"
    (repo / ".fugu" / "config.toml").write_text(f"[checks]\nafter_edit = ['''{ruff}''']\n")  # the repo's
    loopback.script(
        "solo",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + c")),
            tool_reply(call("edit_file", path="calc.py", old_text="a + c", new_text="a + b")),
            "Fixed add; ruff is clean.",
        ],
    )
    run = fugu(
        "-p", "fix add", "--pool", pool(tmp_path, loopback, {"name": "solo"}),
        "--permission-mode", "full-auto", "--trust-project", cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    broken, fixed = tool_messages(loopback, "solo")
    assert "Checks after this edit found problems (calc.py):" in broken
    assert "calc.py:2:16: F821 Undefined name `c`" in broken
    second_step = loopback.requests_for("solo")[1].messages
    assert any("F821 Undefined name `c`" in (m["content"] or "") for m in second_step if m["role"] == "tool")
    assert "Checks after this edit passed (calc.py)" in fixed
    assert "Checks after this edit found problems: 1 of 1 failed (calc.py)" in run.stderr  # said to the user


def test_add_dir_opens_one_sibling_folder_and_nothing_else(tmp_path: Path, loopback: LoopbackServer) -> None:
    repo = make_repo(tmp_path / "repo")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "util.py").write_text("X = 1\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("untouched\n")
    loopback.script(
        "solo",
        [
            tool_reply(call("edit_file", path="../lib/util.py", old_text="X = 1", new_text="X = 2")),
            tool_reply(call("shell", command="echo made > ../lib/made.txt; echo no > ../other/keep.txt")),
            tool_reply(call("write_file", path="../other/keep.txt", content="changed\n")),
            "done",
        ],
    )
    run = fugu(
        "-p", "bump X in the lib", "--add-dir", "../lib",
        "--pool", pool(tmp_path, loopback, {"name": "solo"}), "--permission-mode", "full-auto", cwd=repo,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert (tmp_path / "lib" / "util.py").read_text() == "X = 2\n"
    assert (tmp_path / "lib" / "made.txt").read_text() == "made\n"
    assert (tmp_path / "other" / "keep.txt").read_text() == "untouched\n"
    edited, shell, refused = tool_messages(loopback, "solo")
    assert edited.startswith("Edited ../lib/util.py") and "exit code: 1" in shell
    assert "outside the repository" in refused
    bad = fugu(
        "-p", "x", "--add-dir", "../missing", "--pool", pool(tmp_path, loopback, {"name": "solo"}), cwd=repo
    )
    assert bad.code == 2 and bad.stderr.strip() == "fugu: --add-dir ../missing: no such folder"


def test_a_stream_json_image_block_goes_to_the_worker_that_sees(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    workers = ({"name": "blind", "priority": 2}, {"name": "seer", "priority": 1, "vision": True})
    loopback.script("seer", ["A pixel."])
    data = base64.b64encode(PNG).decode()
    blocks = [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"},
        },
    ]
    line = json.dumps({"type": "user", "message": {"role": "user", "content": blocks}})
    run = fugu(
        "-p", "--input-format", "stream-json", "--output-format", "stream-json",
        "--pool", pool(tmp_path, loopback, *workers), cwd=repo, stdin=line + "\n",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert "an image block was ignored: image block is not a PNG" in run.stderr
    sent = loopback.requests_for("seer")[0].messages[-1]["content"]
    assert [p["type"] for p in sent] == ["text", "image_url"] and data in sent[1]["image_url"]["url"]
    assert loopback.requests_for("blind") == []
