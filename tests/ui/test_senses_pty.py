"""The senses in the real REPL (a pty, pexpect): a web page is asked for in ask mode and reaches the worker
once allowed, /add-dir opens a sibling folder, and a pasted picture's path goes to the worker that sees."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer
from tests.ui.test_repl_pty import PROMPT, SLOW, Term
from tests.web_kit import PageServer

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    with LoopbackServer() as s:
        yield s


def test_ask_for_a_page_add_a_folder_and_paste_a_picture(
    tmp_path: Path, server: LoopbackServer, pages: PageServer
) -> None:
    repo = make_repo(tmp_path / "repo")
    workers = [
        {"name": "alpha", "model": "openai/alpha", "api_base": server.base_url, "priority": 2},
        {"name": "seer", "model": "openai/seer", "api_base": server.base_url, "priority": 1, "vision": True},
    ]
    write_pool(repo / ".fugu-pool.toml", workers)
    (repo / ".git" / "info" / "exclude").write_text(".fugu-pool.toml\n")
    (tmp_path / "lib").mkdir()
    shot = tmp_path / "shots" / "bug.png"
    shot.parent.mkdir()
    shot.write_bytes(PNG)
    url = pages.html("/docs", "<h1>Hello docs</h1><p>use <code>add</code></p>")
    server.script(
        "alpha",
        [
            tool_reply(call("web_fetch", url=url)),
            "The docs say to use add.",
            tool_reply(call("read_file", path="../lib/note.txt")),
            "The note says hi.",
        ],
    )
    server.script("seer", ["One red pixel."])
    child = Term(repo)
    child.turn("what do the docs say?")
    child.expect(rf"alpha wants to fetch {url} \(a private address\)", timeout=SLOW)
    child.expect(r"Allow alpha to fetch this\? \[y\]es \[n\]o \[a\]lways \(web:127\.0\.0\.1\)")
    assert pages.requests == []  # nothing fetched before the answer
    child.send("y")
    child.expect("The docs say to use add.", timeout=SLOW)
    child.finished()
    fetched = [m["content"] for m in server.requests_for("alpha")[-1].messages if m["role"] == "tool"]
    assert "# Hello docs" in fetched[0] and "Untrusted content" in fetched[0]

    (tmp_path / "lib" / "note.txt").write_text("hi\n")
    child.send("/add-dir ../lib\r")
    child.expect(r"added\s+\S+/lib:\s+readable and, as the")  # the line may wrap around the path
    child.expect(PROMPT)
    child.send("what does the note in the lib say?\r")
    child.expect("The note says hi.", timeout=SLOW)
    child.finished()
    read = [m["content"] for m in server.requests_for("alpha")[-1].messages if m["role"] == "tool"]
    assert "hi" in read[-1] and "outside" not in read[-1]

    child.send(f"what is wrong in {shot}\r")
    child.expect(r"attached\s", timeout=SLOW)  # its path may wrap anywhere; what was sent is checked below
    child.expect(r"↳ seer", timeout=SLOW)
    child.expect("One red pixel.", timeout=SLOW)
    child.finished()
    sent = server.requests_for("seer")[0].messages[-1]["content"]
    assert [p["type"] for p in sent] == ["text", "image_url"]
    assert len(server.requests_for("alpha")) == 4  # alpha never saw the picture's step
    child.quit()
