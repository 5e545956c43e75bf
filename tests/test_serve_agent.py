"""fugu's own agent behind `fugu serve` as the openai SDK sees it: a turn that changed files is never run
again for a repeated request, even when it failed; `response_format` and `stop` shape the agent's answer."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from tests.helpers import FIXED, call, tool_reply
from tests.loopback import LoopbackServer
from tests.serve_kit import KEY, Serve, ask, no_retries, pool_file, post

AGENT = "fugu-agent"
EDIT = tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b"))


def _posts(loopback: LoopbackServer) -> int:
    return len([r for r in loopback.requests if r.method == "POST"])


def test_a_repeated_request_after_an_edit_gets_the_first_answer_back(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", [EDIT, "fixed add()"])
    server = serve(pool_file(tmp_path, loopback, "alpha"), permission_mode="auto-edit")
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    messages = [{"role": "user", "content": "fix calc.py"}]
    first = client.chat.completions.with_raw_response.create(model=AGENT, messages=messages)  # type: ignore[arg-type]
    assert first.parse().choices[0].message.content == "fixed add()"
    assert (tmp_path / "repo" / "calc.py").read_text() == FIXED
    calls = _posts(loopback)

    again = client.chat.completions.with_raw_response.create(model=AGENT, messages=messages)  # type: ignore[arg-type]
    assert again.parse().choices[0].message.content == "fixed add()"
    assert (
        again.headers["x-fugu-replayed"] == "true"
        and again.headers["x-fugu-session"] == first.headers["x-fugu-session"]
    )
    assert _posts(loopback) == calls  # no worker was asked again


def test_a_failed_turn_that_edited_is_502_and_never_run_again(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    no_retries()
    loopback.script("alpha", [EDIT, {"fault": 500}])
    server = serve(pool_file(tmp_path, loopback, "alpha"), permission_mode="auto-edit")
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=2)
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(model=AGENT, messages=[{"role": "user", "content": "fix calc.py"}])
    assert failed.value.status_code == 502 and failed.value.response.headers["x-should-retry"] == "false"
    assert _posts(loopback) == 2  # the edit step and the failing step; the SDK did not retry the turn
    status, data, headers = post(server.url, ask("fix calc.py", AGENT))
    assert status == 502 and headers["x-fugu-replayed"] == "true" and data["fugu"]["replayed"] is True
    assert _posts(loopback) == 2


def test_a_repeated_read_only_request_runs_again(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    loopback.script("alpha", ["first look", "second look"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    one = post(server.url, ask("look at calc.py", AGENT))[1]
    two = post(server.url, ask("look at calc.py", AGENT))[1]
    assert (one["choices"][0]["message"]["content"], two["choices"][0]["message"]["content"]) == (
        "first look",
        "second look",
    )


def test_parse_with_a_pydantic_model_shapes_the_agents_answer(
    tmp_path: Path, loopback: LoopbackServer, serve: Serve
) -> None:
    class Sum(BaseModel):
        total: int
        explanation: str

    loopback.script("alpha", ["Two plus three is five.", '{"total": 5, "explanation": "2 + 3"}'])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    parsed = client.chat.completions.parse(
        model=AGENT, messages=[{"role": "user", "content": "2+3?"}], response_format=Sum
    )
    assert parsed.choices[0].message.parsed == Sum(total=5, explanation="2 + 3")
    shaping = loopback.requests_for("alpha")[-1].body
    assert shaping["response_format"]["json_schema"]["name"] == "Sum"
    assert "Two plus three is five." in shaping["messages"][0]["content"]


def test_stop_cuts_the_answer_streamed_or_not(tmp_path: Path, loopback: LoopbackServer, serve: Serve) -> None:
    loopback.script("alpha", ["keep this STOP drop this", "keep STOP drop"])
    server = serve(pool_file(tmp_path, loopback, "alpha"))
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    reply = client.chat.completions.create(
        model=AGENT, messages=[{"role": "user", "content": "a"}], stop="STOP"
    )
    assert reply.choices[0].message.content == "keep this "
    stream = client.chat.completions.create(
        model=AGENT, messages=[{"role": "user", "content": "b"}], stop=["STOP"], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream) == "keep "
