"""The agent's LLM client against the loopback provider on both of its paths: OpenAI-compatible workers posted
to directly (`direct`) and through litellm's own HTTP code (`litellm`, also the only path for Anthropic's
shape), each OpenAI-shaped behaviour checked on both."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from fugu_cli.calls import RetryPolicy
from fugu_cli.errors import Interrupted, ProviderError
from fugu_cli.llm.client import LOCAL_DUMMY_KEY, ClientConfig, LiteLLMClient, load_litellm
from fugu_cli.types import Completion, Message, ToolCall, Worker
from tests.calls_kit import through_calls
from tests.helpers import call, tool_reply
from tests.loopback import LoopbackServer, RecordedRequest, SilentServer

FAST = ClientConfig(timeout_s=5.0)
SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    },
}
TASK = [Message("system", "You are fugu."), Message("user", "list the files")]


@pytest.fixture(params=["direct", "litellm"])
def path(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def on(path: str, config: ClientConfig = FAST) -> ClientConfig:
    """`config` for the client path under test."""
    return dataclasses.replace(config, direct=path == "direct")


def openai_worker(server: LoopbackServer, model: str = "openai/test-model", **kw: object) -> Worker:
    return Worker(name="w-open", model=model, api_base=server.base_url, **kw)  # type: ignore[arg-type]


def test_text_reply(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", ["hello from loopback"])
    done = LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [SHELL_TOOL])
    assert done.message.content == "hello from loopback"
    assert done.message.role == "assistant" and done.message.worker == "w-open"
    assert done.message.tool_calls == ()
    assert done.finish_reason == "stop"
    [req] = loopback.requests
    assert req.path == "/v1/chat/completions" and req.model == "test-model"
    assert req.messages == [m.to_openai() for m in TASK]
    assert req.body["tools"][0]["function"]["name"] == "shell"
    assert "authorization" not in req.headers
    # nothing litellm-only reaches the wire; a direct call streams (its status line proves the worker alive)
    streamed = {"stream", "stream_options"} if path == "direct" else set()
    assert set(req.body) == {"model", "messages", "tools"} | streamed
    # litellm calls through the OpenAI SDK, which signs its requests; the direct path is plain urllib3
    assert any(h.startswith("x-stainless") for h in req.headers) == (path == "litellm")


def test_tool_call_reply_keeps_arguments(path: str, loopback: LoopbackServer) -> None:
    args = {"cmd": "ls -la 'a b'", "nested": {"n": [1, 2]}}
    loopback.script("test-model", [{"tool_calls": [{"id": "call_42", "name": "shell", "arguments": args}]}])
    done = LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [SHELL_TOOL])
    [call] = done.message.tool_calls
    assert (call.id, call.name) == ("call_42", "shell")
    assert json.loads(call.arguments) == args
    assert done.finish_reason == "tool_calls"


def test_invalid_tool_arguments_pass_through_raw(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"tool_calls": [{"name": "shell", "arguments": '{"cmd": "ls'}]}])
    done = LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [SHELL_TOOL])
    assert done.message.tool_calls[0].arguments == '{"cmd": "ls'


def test_missing_tool_call_ids_are_synthesized(path: str, loopback: LoopbackServer) -> None:
    calls = [{"id": None, "name": "shell", "arguments": {"cmd": c}} for c in ("a", "b")]
    loopback.script("test-model", [{"tool_calls": calls}, {"tool_calls": calls}])
    client = LiteLLMClient(on(path))
    plain = client.complete(openai_worker(loopback), TASK, [SHELL_TOOL])
    streamed = client.complete(openai_worker(loopback), TASK, [SHELL_TOOL], on_text=lambda _t: None)
    ids = [c.id for c in plain.message.tool_calls + streamed.message.tool_calls]
    assert all(ids) and len(set(ids)) == 4
    assert [json.loads(c.arguments)["cmd"] for c in streamed.message.tool_calls] == ["a", "b"]


def test_streaming_text_and_tool_call(path: str, loopback: LoopbackServer) -> None:
    text = "Let me look at the repository first."
    args = {"cmd": "git status --porcelain", "timeout": 30}
    reply = {"content": text, "tool_calls": [{"id": "call_s", "name": "shell", "arguments": args}]}
    loopback.script("test-model", [{**reply, "usage": {"prompt_tokens": 321, "completion_tokens": 45}}])
    deltas: list[str] = []
    done = LiteLLMClient(on(path)).complete(
        openai_worker(loopback), TASK, [SHELL_TOOL], on_text=deltas.append
    )
    assert len(deltas) > 3 and "".join(deltas) == text
    assert done.message.content == text
    [call] = done.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_s", "shell", args)
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (321, 45)
    [req] = loopback.requests
    assert req.stream and req.body["stream_options"] == {"include_usage": True}


def test_cost_from_worker_prices(path: str, loopback: LoopbackServer) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 500, "cached_tokens": 200}
    loopback.script("test-model", [{"content": "ok", "usage": usage}])
    worker = openai_worker(loopback, price_in=2.0, price_out=10.0)
    done = LiteLLMClient(on(path)).complete(worker, TASK, [])
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens) == (
        1000,
        500,
        200,
    )
    assert done.usage.cost_usd == pytest.approx(0.002 + 0.005)


def test_cost_from_litellm_table(path: str, loopback: LoopbackServer) -> None:
    loopback.script(
        "gpt-4o-mini", [{"content": "ok", "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}}]
    )
    client = LiteLLMClient(on(path))
    done = client.complete(openai_worker(loopback, model="openai/gpt-4o-mini"), TASK, [])
    assert done.usage.cost_usd == pytest.approx(1000 * 0.15e-6 + 1000 * 0.6e-6)
    assert done.warnings == ()


def test_unknown_price_costs_zero_and_warns_once(
    path: str, loopback: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    model = f"openai/unpriced-{uuid.uuid4().hex[:8]}"
    client = LiteLLMClient(on(path))
    with caplog.at_level(logging.WARNING, logger="fugu"):
        done = [client.complete(openai_worker(loopback, model=model), TASK, []) for _ in range(3)]
    assert [d.usage.cost_usd for d in done] == [0.0, 0.0, 0.0]
    seen = [w for d in done for w in d.warnings]
    assert len(seen) == 1 and model in seen[0] and done[0].warnings == (seen[0],)
    assert [r.getMessage() for r in caplog.records if model in r.getMessage()] == seen


def complete(client: LiteLLMClient, worker: Worker, retry: RetryPolicy | None = None) -> Completion:
    """One call with retries, as fugu makes it (the worker-call service around the client's attempts)."""
    return through_calls(worker, lambda w: client.complete(w, TASK, []), *(() if retry is None else (retry,)))


def test_rate_limit_then_success_is_retried(path: str, loopback: LoopbackServer) -> None:
    with LoopbackServer() as other:  # litellm's first call sets itself up: not the retries' time (< 3 s)
        LiteLLMClient(on(path)).complete(openai_worker(other), TASK, [])
    loopback.script("test-model", [{"fault": 429}, {"fault": 429, "retry_after": 0.4}, "finally"])
    start = time.monotonic()
    done = complete(LiteLLMClient(on(path)), openai_worker(loopback))
    assert done.message.content == "finally"
    assert [r.status for r in loopback.requests] == [429, 429, 200]
    gap = loopback.requests[2].arrived - loopback.requests[1].finished  # type: ignore[operator]
    assert gap >= 0.35, "Retry-After must be honoured"
    assert time.monotonic() - start < 3.0


def test_server_errors_exhaust_retries(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"fault": 500}] * 6)
    retry = RetryPolicy(max_retries=3, backoff_base_s=0.01)
    with pytest.raises(ProviderError) as err:
        complete(LiteLLMClient(on(path)), openai_worker(loopback), retry)
    assert len(loopback.requests) == 4
    assert err.value.worker == "w-open" and err.value.retryable
    message = str(err.value)
    assert "w-open" in message and "openai/test-model" in message and "500" in message
    assert "\n" not in message


def test_timeout_is_retried_then_fails_in_bounded_time(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"fault": "timeout", "sleep_s": 5}] * 3)
    config = ClientConfig(timeout_s=0.3)
    load_litellm()  # its import (seconds when this test runs first) is not the provider's time
    start = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        complete(LiteLLMClient(on(path, config)), openai_worker(loopback), RetryPolicy(1, 0.01))
    assert time.monotonic() - start < 2.5
    assert len(loopback.requests) == 2


def test_malformed_json_is_retried(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"fault": "malformed"}, "recovered"])
    done = complete(LiteLLMClient(on(path)), openai_worker(loopback))
    assert done.message.content == "recovered"
    assert len(loopback.requests) == 2


def test_unauthorized_is_not_retried_and_names_the_key(
    path: str, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_TEST_KEY", "sk-test-1234")
    loopback.script("test-model", [{"fault": 401}, "never reached"])
    with pytest.raises(ProviderError) as err:
        complete(LiteLLMClient(on(path)), openai_worker(loopback, api_key_env="FUGU_TEST_KEY"))
    assert not err.value.retryable
    assert len(loopback.requests) == 1 and "401" in str(err.value)
    assert str(err.value).endswith("; check the key in FUGU_TEST_KEY")  # which of the user's keys


def test_connection_refused_is_retried_then_fails(path: str) -> None:
    server = LoopbackServer().start()
    worker = openai_worker(server)
    server.stop()
    with pytest.raises(ProviderError, match="w-open") as err:
        complete(LiteLLMClient(on(path, ClientConfig(timeout_s=2.0))), worker, RetryPolicy(1, 0.01))
    assert err.value.retryable and "after 2 attempts" in str(err.value)


def test_missing_key_fails_before_any_request(path: str, loopback: LoopbackServer) -> None:
    worker = Worker(name="w-key", model="openai/test-model", api_key_env="FUGU_TEST_NO_SUCH_KEY")
    with pytest.raises(ProviderError, match="FUGU_TEST_NO_SUCH_KEY is not set") as err:
        LiteLLMClient(on(path)).complete(worker, TASK, [])
    assert not err.value.retryable and loopback.requests == []


def test_key_from_environment_is_sent(
    path: str, loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_TEST_KEY", "sk-secret-1234")
    LiteLLMClient(on(path)).complete(openai_worker(loopback, api_key_env="FUGU_TEST_KEY"), TASK, [])
    LiteLLMClient(on(path)).complete(anthropic_worker(loopback, api_key_env="FUGU_TEST_KEY"), TASK, [])
    assert [r.key_tail for r in loopback.requests] == ["1234", "1234"]
    assert all("authorization" not in r.headers and "x-api-key" not in r.headers for r in loopback.requests)


def test_local_server_without_key_gets_a_dummy_key(path: str, loopback: LoopbackServer) -> None:
    LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [])
    assert loopback.requests[0].key_tail == LOCAL_DUMMY_KEY[-4:]


def test_cancel_during_slow_stream_is_prompt(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"content": "x" * 400, "chunk_size": 2, "chunk_delay_s": 0.1}])
    cancel = threading.Event()
    deltas: list[str] = []
    cancelled_at: list[float] = []

    def on_text(piece: str) -> None:
        deltas.append(piece)
        if len(deltas) == 3 and not cancel.is_set():
            cancelled_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(Interrupted):
        LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [], on_text=on_text, cancel=cancel)
    assert time.monotonic() - cancelled_at[0] < 0.2
    assert 3 <= len(deltas) < 10


def test_cancel_before_reply_arrives(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", [{"content": "late", "delay_s": 3}])
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(Interrupted):
        LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [], cancel=cancel)
    assert time.monotonic() - start < 1.0


def handoff_transcript() -> list[Message]:
    """A step by worker `other`, with its tool result, then the next step goes to a different worker."""
    call = ToolCall("call_abc123", "shell", '{"cmd": "ls"}')
    return [
        *TASK,
        Message("assistant", None, (call,), worker="other"),
        Message("tool", "README.md\nsetup.py", tool_call_id="call_abc123", name="shell", worker="other"),
    ]


def test_transcript_from_another_worker_round_trips(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", ["two files"])
    LiteLLMClient(on(path)).complete(openai_worker(loopback), handoff_transcript(), [SHELL_TOOL])
    sent = loopback.requests[0].messages
    assert sent[2]["role"] == "assistant" and sent[2]["tool_calls"][0]["id"] == "call_abc123"
    assert sent[2]["tool_calls"][0]["function"] == {"name": "shell", "arguments": '{"cmd": "ls"}'}
    assert sent[3] == {
        "role": "tool",
        "tool_call_id": "call_abc123",
        "content": "README.md\nsetup.py",
        "name": "shell",
    }
    assert all("worker" not in m for m in sent)


def anthropic_worker(server: LoopbackServer, **kw: object) -> Worker:
    return Worker(name="w-claude", model="anthropic/claude-test", api_base=server.url, **kw)  # type: ignore[arg-type]


def test_anthropic_shape_text_and_tool_use(loopback: LoopbackServer) -> None:
    args = {"cmd": "pytest -q"}
    loopback.script(
        "claude-test",
        [
            {
                "content": "running tests",
                "tool_calls": [{"id": "toolu_1", "name": "shell", "arguments": args}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 7},
            }
        ],
    )
    done = LiteLLMClient(FAST).complete(anthropic_worker(loopback), handoff_transcript(), [SHELL_TOOL])
    assert done.message.content == "running tests" and done.message.worker == "w-claude"
    [call] = done.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "shell", args)
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (50, 7)
    [req] = loopback.requests
    assert req.path == "/v1/messages"
    blocks = [
        b for m in req.body["messages"] for b in (m["content"] if isinstance(m["content"], list) else [])
    ]
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    results = [b for b in blocks if b.get("type") == "tool_result"]
    assert uses[0]["id"] == "call_abc123" and results[0]["tool_use_id"] == "call_abc123"
    assert "README.md" in json.dumps(results[0]["content"])
    assert req.body["system"]


def test_anthropic_shape_rate_limit_retried(loopback: LoopbackServer) -> None:
    loopback.script("claude-test", [{"fault": 429}, "fine"])
    done = complete(LiteLLMClient(FAST), anthropic_worker(loopback))
    assert done.message.content == "fine" and len(loopback.requests) == 2


def test_anthropic_shape_streaming(loopback: LoopbackServer) -> None:
    args = {"path": "calc.py", "text": "def add(a, b):\n    return a + b\n"}
    reply = {
        "content": "Fixing calc.py now.",
        "tool_calls": [{"id": "toolu_9", "name": "write", "arguments": args}],
    }
    loopback.script("claude-test", [{**reply, "usage": {"prompt_tokens": 80, "completion_tokens": 20}}])
    deltas: list[str] = []
    done = LiteLLMClient(FAST).complete(anthropic_worker(loopback), TASK, [SHELL_TOOL], on_text=deltas.append)
    assert len(deltas) > 2 and "".join(deltas) == "Fixing calc.py now."
    [call] = done.message.tool_calls
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_9", "write", args)
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (80, 20)
    assert loopback.requests[0].stream


def test_load_litellm_configures_it_once() -> None:
    lib = load_litellm()
    assert load_litellm() is lib
    assert lib.suppress_debug_info is True
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"


def test_on_text_errors_propagate_without_retry(path: str, loopback: LoopbackServer) -> None:
    loopback.script("test-model", ["some streamed text", "second"])

    def broken(_piece: str) -> None:
        raise RuntimeError("renderer bug")

    with pytest.raises(RuntimeError, match="renderer bug"):
        LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [], on_text=broken)
    assert len(loopback.requests) == 1


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


SILENT = ClientConfig(timeout_s=20.0, first_byte_timeout_s=0.5)


# through litellm a reply nobody shows is asked whole: it has timeout_s only (the next test)
@pytest.mark.parametrize(
    ("path", "shown"),
    [("direct", True), ("direct", False), ("litellm", True)],
    ids=["direct-text-shown", "direct-text-not-shown", "litellm-text-shown"],
)
def test_silent_worker_is_cut_off_after_the_first_byte_timeout_without_retry(
    path: str, silent: SilentServer, shown: bool, loopback: LoopbackServer
) -> None:
    client = LiteLLMClient(on(path, SILENT))
    worker = Worker(name="w-mute", model="openai/test-model", api_base=silent.base_url)
    # litellm's import and its first call's own set-up are not the worker's silence: on a loaded machine
    # they took longer than the 0.5 s limit, which cut the call before it connected
    LiteLLMClient(on(path)).complete(openai_worker(loopback), TASK, [], on_text=lambda _t: None)
    start = time.monotonic()
    on_text = (lambda _t: None) if shown else None
    with pytest.raises(ProviderError, match=r"sent nothing for 0\.5 s") as err:  # retries allowed, none made
        through_calls(worker, lambda w: client.complete(w, TASK, [], on_text=on_text))
    assert 0.5 <= time.monotonic() - start < 3.0  # not timeout_s, and not three attempts
    assert not err.value.retryable and err.value.worker == "w-mute"
    assert silent.connections == 1 and silent.posts == 1


@pytest.mark.parametrize(
    ("path", "stream"),
    [("direct", False), ("litellm", False), ("litellm", True)],
    ids=["direct-stream-off", "litellm-stream-off", "litellm-text-not-shown"],
)
def test_whole_replies_have_the_overall_timeout_only(path: str, stream: bool, silent: SilentServer) -> None:
    """`[llm] stream = false` (and litellm's calls whose text nobody shows): a whole reply shows no sign of
    life before it is complete, which may rightly take long, so only `timeout_s` (retried as ever) cuts a
    silent worker."""
    config = dataclasses.replace(SILENT, stream=stream, timeout_s=1.5)
    worker = Worker(name="w-mute", model="openai/test-model", api_base=silent.base_url)
    load_litellm()
    start = time.monotonic()
    with pytest.raises(ProviderError, match="timed out") as err:
        LiteLLMClient(on(path, config)).complete(worker, TASK, [])
    assert time.monotonic() - start >= 1.4 and err.value.retryable


def test_a_slow_stream_whose_first_chunk_is_prompt_is_not_cut_off(
    path: str, loopback: LoopbackServer
) -> None:
    # the whole stream (8 chunks, 0.5 s apart) outlasts the first-byte limit (3 s); its first chunk comes
    # well within it. A first call warms the client up: litellm's own first-call set-up, seconds on a loaded
    # machine, would otherwise count against the first byte (a 0.4 s limit failed under CI's load, and a
    # 1.2 s one through litellm in a full local run at load 5)
    loopback.script("test-model", ["ready", {"content": "abcdefgh", "chunk_size": 1, "chunk_delay_s": 0.5}])
    client = LiteLLMClient(on(path, dataclasses.replace(SILENT, first_byte_timeout_s=3.0)))
    client.complete(openai_worker(loopback), TASK, [], on_text=lambda _: None)
    pieces: list[str] = []
    started = time.monotonic()
    done = client.complete(openai_worker(loopback), TASK, [], on_text=pieces.append)
    assert done.message.content == "abcdefgh" and len(pieces) >= 4
    assert time.monotonic() - started > 3.0  # it went on past the first-byte limit


class IgnoresStream(LoopbackServer):
    """An OpenAI-compatible server that answers a stream request with the whole completion as JSON."""

    def record(self, request: RecordedRequest) -> None:
        if isinstance(request.body, dict):
            request.body.pop("stream", None)
        super().record(request)


def test_a_server_that_ignores_stream_is_still_understood() -> None:
    with IgnoresStream() as server:
        server.script("test-model", [tool_reply(call("shell", cmd="ls"), content="looking")])
        config = on("direct", FAST)
        pieces: list[str] = []
        done = LiteLLMClient(config).complete(
            openai_worker(server), TASK, [SHELL_TOOL], on_text=pieces.append
        )
    assert done.message.content == "looking" and pieces == ["looking"]
    assert [(c.name, json.loads(c.arguments)) for c in done.message.tool_calls] == [("shell", {"cmd": "ls"})]


def test_warming_for_openai_compatible_priced_workers_leaves_litellm_unloaded() -> None:
    """The REPL warms the client for its pool, and `fugu serve` its pass-through's: litellm (150 MiB,
    seconds) only comes in for a worker that needs it, one litellm translates for or whose reply is priced
    from litellm's table."""
    code = (
        "import sys\n"
        "from fugu_cli.llm.client import LiteLLMClient\n"
        "from fugu_cli.llm.forward import Forwarder\n"
        "from fugu_cli.types import Worker\n"
        "base = 'http://127.0.0.1:9/v1'\n"
        "local = Worker(name='q', model='openai/qwen', api_base=base, price_in=0, price_out=0)\n"
        "client = LiteLLMClient()\n"
        "client.warm([local])\n"
        "Forwarder().warm([local])\n"
        "unpriced = Worker(name='u', model='openai/qwen', api_base=base)\n"
        "claude = Worker(name='c', model='anthropic/claude-sonnet-4-5')\n"
        "print('litellm' in sys.modules, client.needs_litellm(local), client.needs_litellm(unpriced),\n"
        "      client.needs_litellm(claude))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True", "True"]
