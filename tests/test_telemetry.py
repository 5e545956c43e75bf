"""OpenTelemetry export against a loopback OTLP/HTTP receiver: a real HTTP server in the test that decodes
the protobuf requests fugu's exporter sends. Two turns of a real `fugu` process give two traces, each with
a span per step carrying its worker and cost, the routing decision and the tool calls under it; the metrics
add up to what the turns' results say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fugu_cli import telemetry
from fugu_cli.config import TelemetrySettings, load_config
from tests.helpers import FIXED, call, fugu, make_repo, tool_reply, write_pool
from tests.loopback import LoopbackServer


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1: keeps every span and metric data point it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.points: list[tuple[str, dict[str, Any], float]] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                assert self.headers.get("Content-Type") == "application/x-protobuf"
                if self.path == "/v1/traces":
                    receiver._traces(body)
                elif self.path == "/v1/metrics":
                    receiver._metrics(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        {
                            "name": s.name,
                            "trace": s.trace_id.hex(),
                            "id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex(),
                            "attrs": {a.key: _value(a.value) for a in s.attributes},
                            "status": s.status.code,
                            "service": {a.key: _value(a.value) for a in rs.resource.attributes}[
                                "service.name"
                            ],
                        }
                    )

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for p in m.sum.data_points:
                        attrs = {a.key: _value(a.value) for a in p.attributes}
                        value = p.as_double if p.HasField("as_double") else p.as_int
                        self.points.append((m.name, attrs, float(value)))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]

    def total(self, metric: str, **match: str) -> float:
        return sum(
            v for n, a, v in self.points if n == metric and all(a.get(k) == x for k, x in match.items())
        )


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value"))


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _user(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}})


def test_a_trace_per_turn_with_a_span_per_step_carrying_worker_and_cost(
    tmp_path: Path, loopback: LoopbackServer, receiver: Receiver
) -> None:
    repo = make_repo(tmp_path / "repo")
    workers = [
        {
            "name": "alpha",
            "model": "openai/alpha",
            "api_base": loopback.base_url,
            "priority": 2,
            "price_in": 2.0,
        },
        {"name": "beta", "model": "openai/beta", "api_base": loopback.base_url, "price_in": 1.0},
    ]
    pool = write_pool(tmp_path / "pool.toml", workers)
    (Path(os.environ["FUGU_HOME"]) / "config.toml").write_text("[llm]\nmax_retries = 0\n")
    secret = "tok-5e4d3c2b1a009988"
    loopback.script(
        "alpha",
        [
            tool_reply(call("edit_file", path="calc.py", old_text="a - b", new_text="a + b")),
            {"fault": 500},
            f"Fixed; the deploy token {secret} was not needed.",
        ],
    )
    loopback.script("beta", [tool_reply(call("shell", command="python3 test_calc.py")), "It passes."])
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "DEPLOY_TOKEN": secret, "OTEL_SERVICE_NAME": "x"}
    run = fugu(
        "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--yes",
        "--pool", str(pool),
        cwd=repo,
        stdin="\n".join([_user("fix calc.py"), _user("and run the test")]) + "\n",
        env=env,
    )  # fmt: skip
    assert run.code == 0, run.stderr
    assert (repo / "calc.py").read_text() == FIXED
    results = [e for e in run.events() if e["type"] == "result"]
    routes = [e for e in run.events() if e.get("subtype") == "route"]
    assert len(results) == 2

    turns = receiver.named("fugu.turn")
    assert len(turns) == 2 and len({t["trace"] for t in turns}) == 2  # one trace per turn
    assert all(t["parent"] == "" for t in turns)
    steps = receiver.named("fugu.step")
    by_turn = {t["trace"]: [s for s in steps if s["trace"] == t["trace"]] for t in turns}
    for turn, result in zip(turns, results, strict=True):
        mine = by_turn[turn["trace"]]
        assert all(s["parent"] == turn["id"] for s in mine)
        finished = [s for s in mine if "fugu.cost_usd" in s["attrs"]]
        assert len(finished) == result["num_turns"]  # a span per step that ran
        assert sum(s["attrs"]["fugu.cost_usd"] for s in finished) == pytest.approx(result["total_cost_usd"])
        assert turn["attrs"]["fugu.cost_usd"] == pytest.approx(result["total_cost_usd"])
        assert turn["attrs"]["fugu.status"] == "success"
    # the failed call: its step span ends in error, and the step is re-routed to beta (a fallback)
    failed = [s for s in steps if s["status"] == 2]
    assert [s["attrs"]["fugu.worker"] for s in failed] == ["alpha"]
    assert [s["attrs"]["fugu.worker"] for s in steps] == [r["worker"] for r in routes]
    route_spans = receiver.named("fugu.route")
    assert len(route_spans) == len(routes)
    assert {r["parent"] for r in route_spans} == {s["id"] for s in steps}
    fallback = [r for r in route_spans if r["attrs"]["fugu.route.source"] == "fallback"]
    assert fallback and "alpha failed" in fallback[0]["attrs"]["fugu.route.reason"]
    assert all(
        "fugu.route.latency_ms" in r["attrs"] and "fugu.route.probability" in r["attrs"] for r in route_spans
    )
    tools = receiver.named("fugu.tool")
    assert [(t["attrs"]["fugu.tool"], t["attrs"]["fugu.tool.target"]) for t in tools] == [
        ("edit_file", "calc.py"),
        ("shell", "python3 test_calc.py"),
    ]
    assert {t["parent"] for t in tools} <= {s["id"] for s in steps}
    assert {s["service"] for s in receiver.spans} == {"x"}
    assert secret not in json.dumps(receiver.spans)  # attributes are redacted

    total = sum(r["total_cost_usd"] for r in results)
    assert receiver.total("fugu.cost") == pytest.approx(total)
    assert receiver.total("fugu.steps") == sum(r["num_turns"] for r in results)
    assert receiver.total("fugu.failovers", worker="alpha") == 1
    assert receiver.total("fugu.turns", status="success") == 2
    assert receiver.total("fugu.tokens", type="output") > 0


def test_off_unless_asked_and_the_sdk_is_not_imported(tmp_path: Path) -> None:
    settings = TelemetrySettings()
    assert not telemetry.enabled(settings, {})
    assert telemetry.enabled(settings, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert not telemetry.enabled(TelemetrySettings(enabled=False), {"OTEL_EXPORTER_OTLP_ENDPOINT": "x"})
    assert telemetry.enabled(TelemetrySettings(enabled=True), {})
    assert not telemetry.enabled(TelemetrySettings(enabled=True), {"OTEL_SDK_DISABLED": "true"})
    code = (
        "import sys; from fugu_cli.config import TelemetrySettings; from fugu_cli import telemetry;"
        "assert telemetry.observer(TelemetrySettings(), []) is None;"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.sdk')], 'imported'"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path)


def test_a_repository_cannot_turn_telemetry_on(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / ".fugu").mkdir()
    (repo / ".fugu" / "config.toml").write_text(
        '[telemetry]\nenabled = true\nendpoint = "http://evil:4318"\n'
    )
    config = load_config(repo, {})
    assert config.telemetry.enabled is None and config.telemetry.endpoint is None
    assert "telemetry" in config.ignored
    assert load_config(repo, {}, trust_project=True).telemetry.endpoint == "http://evil:4318"


def test_without_the_sdk_a_session_says_how_to_install_it_and_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker" / "opentelemetry"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('blocked', name='opentelemetry')\n")
    code = (
        "from fugu_cli.config import TelemetrySettings; from fugu_cli import telemetry;"
        "assert telemetry.observer(TelemetrySettings(enabled=True), []) is None"
    )
    env = {**os.environ, "PYTHONPATH": f"{blocker.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "pip install 'fugu-cli[telemetry]'" in run.stderr
