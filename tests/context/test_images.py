"""Images reach a worker that can see them as image parts and never a text-only one: a task's image, an image
read_file returned, the router masking the workers that cannot see, their text-only copy of the transcript,
and one clear error when nobody can see. Real litellm against loopback servers; requests are inspected."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fugu_cli.app import build_session, open_store
from fugu_cli.events import Event, RouteChosen
from fugu_cli.options import RunOptions
from fugu_cli.session import Session
from fugu_cli.tools.images import load_image, prompt_images
from fugu_cli.types import Message
from tests.helpers import call, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def session(tmp_path: Path, server: LoopbackServer, *, seer: bool = True) -> Session:
    repo = make_repo(tmp_path / "repo")
    (repo / "shot.png").write_bytes(PNG)
    workers: list[dict[str, Any]] = [
        # the prior picks the highest priority: the text-only worker, unless it is masked
        {"name": "blind", "model": "openai/blind", "api_base": server.base_url, "priority": 2},
    ]
    if seer:
        workers.append(
            {
                "name": "seer",
                "model": "openai/seer",
                "api_base": server.base_url,
                "priority": 1,
                "vision": True,
            }
        )
    pool = write_pool(tmp_path / "pool.toml", workers)
    return build_session(RunOptions(cwd=repo, pool=str(pool), permission_mode="full-auto"))


def image_parts(messages: list[dict[str, Any]]) -> list[str]:
    return [
        part["image_url"]["url"]
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    ]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content or "")


def test_a_task_image_goes_to_the_worker_that_sees_and_its_note_to_the_one_that_does_not(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    loopback.script("seer", ["A red dot on white."])
    loopback.script("blind", ["You are welcome."])
    s = session(tmp_path, loopback)
    events: list[Event] = []
    shot = load_image(s.root / "shot.png", "shot.png")
    result = s.run_turn("what is in this picture?", events.append, images=[shot])
    assert result.status == "success" and result.result == "A red dot on white."
    assert loopback.requests_for("blind") == []  # masked for the step with the image
    route = next(e.decision for e in events if isinstance(e, RouteChosen) and e.decision)
    assert route.worker == "seer" and "masked (images): blind cannot see images" in route.reason
    sent = loopback.requests_for("seer")[0].messages
    assert image_parts(sent) == [DATA_URL]
    assert text_of(sent[-1]).startswith("what is in this picture?\n\n[image: shot.png (image/png, 1 kB)]")

    # the next turn has no new image: the router may pick the text-only worker, which gets only the note
    assert s.run_turn("thanks").result == "You are welcome."
    blind = loopback.requests_for("blind")[0].messages
    assert image_parts(blind) == []
    first = next(m for m in blind if m["role"] == "user")
    assert "[image: shot.png (image/png, 1 kB)] (not shown: this worker cannot see images)" in text_of(first)
    s.close()

    # stored with the session: a resumed transcript still carries the picture
    stored = open_store().transcript(s.id)
    assert [len(m.images) for m in stored if m.role == "user"] == [1, 0]
    assert stored[1].images[0] == shot and Message.from_json(stored[1].to_json()) == stored[1]


def test_an_image_read_file_returned_reaches_the_next_step_s_worker_that_sees(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    loopback.script("blind", [tool_reply(call("read_file", path="shot.png"))])
    loopback.script("seer", ["The screenshot shows one red pixel."])
    s = session(tmp_path, loopback)
    result = s.run_turn("look at shot.png and tell me what it shows")
    assert result.result == "The screenshot shows one red pixel."
    sent = loopback.requests_for("seer")[0].messages
    tool = next(m for m in sent if m["role"] == "tool")
    assert tool["content"] == "shot.png is an image (image/png, 70 bytes); it is attached below."
    assert sent[-1]["role"] == "user" and image_parts([sent[-1]]) == [DATA_URL]
    assert "Images from the tool results: read_file: [image: shot.png" in text_of(sent[-1])
    assert len(loopback.requests_for("blind")) == 1
    s.close()


def test_with_only_text_only_workers_an_image_is_one_clear_error(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    s = session(tmp_path, loopback, seer=False)
    shot = load_image(s.root / "shot.png", "shot.png")
    result = s.run_turn("what is this?", images=[shot])
    assert result.status == "error_during_execution"
    assert "no worker in the pool can see images (blind)" in result.result
    assert "vision = true" in result.result
    assert loopback.requests_for("blind") == []
    s.close()


def test_a_worker_s_vision_comes_from_litellm_s_table_unless_the_pool_says(
    tmp_path: Path, loopback: LoopbackServer
) -> None:
    from fugu_cli.llm.tokens import LiteLLMTokens
    from fugu_cli.types import Worker

    pool = write_pool(
        tmp_path / "p.toml", [{"name": "x", "model": "openai/x", "api_base": loopback.base_url}]
    )
    policy = build_session(RunOptions(cwd=make_repo(tmp_path / "r"), pool=str(pool))).deps.agent.context
    assert policy is not None
    tokens = policy.counter
    assert isinstance(tokens, LiteLLMTokens)
    assert tokens.sees_images(Worker("a", "openai/gpt-4o")) is True
    assert tokens.sees_images(Worker("b", "openai/gpt-3.5-turbo")) is False
    assert tokens.sees_images(Worker("c", "openai/gpt-3.5-turbo", vision=True)) is True
    assert tokens.sees_images(Worker("d", "openai/gpt-4o", vision=False)) is False


def test_a_prompt_names_images_by_mention_and_by_pasted_path(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "ui").mkdir(parents=True)
    (root / "ui" / "shot.png").write_bytes(PNG)
    (root / "fake.png").write_text("not a picture")
    pasted = tmp_path / "My Shots" / "bug 1.png"
    pasted.parent.mkdir()
    pasted.write_bytes(PNG)
    escaped = str(pasted).replace(" ", "\\ ")
    images, problems = prompt_images(f"see @ui/shot.png, and {escaped} and @fake.png", [root])
    assert [i.name for i in images] == ["ui/shot.png", str(pasted)]
    assert problems == ["fake.png is not a PNG, JPEG, GIF or WebP image"]
    quoted, _ = prompt_images(f"'{pasted}' and file://{str(pasted).replace(' ', '%20')}", [root])
    assert [i.name for i in quoted] == [str(pasted)]  # one image, named twice
    outside, _ = prompt_images("@../escape.png", [root])
    assert outside == []


def test_an_anthropic_worker_gets_the_image_as_an_image_block(
    tmp_path: Path, loopback_factory: Callable[[], LoopbackServer]
) -> None:
    server = loopback_factory()
    repo = make_repo(tmp_path / "repo")
    pool = write_pool(
        tmp_path / "pool.toml",
        [{"name": "claude", "model": "anthropic/claude-sonnet-4-5-20250929", "api_base": server.url}],
    )
    server.script("claude-sonnet-4-5-20250929", ["I see it."])
    s = build_session(RunOptions(cwd=repo, pool=str(pool)))
    (repo / "shot.png").write_bytes(PNG)
    assert s.run_turn("look", images=[load_image(repo / "shot.png")]).result == "I see it."
    content = server.requests_for("claude-sonnet-4-5-20250929")[0].messages[-1]["content"]
    blocks = [b for b in content if b.get("type") == "image"]
    assert blocks == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": DATA_URL.split(",")[1]},
        }
    ]
    s.close()


@pytest.fixture(autouse=True)
def _no_key_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
