"""The agent's senses through the real CLI (`fugu -p`, and the REPL in a pty) against loopback servers: a web
page reaches the model as Markdown, the user is asked for a host in ask mode, a picture goes to the worker
that sees, an edit that breaks ruff comes back with the diagnostic, and --add-dir opens one sibling folder."""

from __future__ import annotations

import base64
import os
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
