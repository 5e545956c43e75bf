"""OpenTelemetry export, opt in: `[telemetry]` in config, or the standard `OTEL_EXPORTER_OTLP_*ENDPOINT`
variables. A trace per turn, with a span per step (its worker, tokens and cost), the routing decision under
it (worker, probability, latency, reason) and each tool call; counters of cost, tokens, steps, failovers
and escalations. Every text attribute is redacted.

The only module that imports the OpenTelemetry SDK, and only once telemetry is on. It keeps its own tracer
and meter providers (never the global ones, which other libraries' instrumentation may use); they are
flushed when the process exits. Never prints.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fugu_cli.events import (
    AssistantMessage,
    Compacted,
    Emit,
    Event,
    ProviderFailed,
    RouteChosen,
    SessionStarted,
    StepFinished,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    WorkflowAgentEvent,
)
from fugu_cli.redact import redact, register_secret_values
from fugu_cli.types import ToolCall, Worker

if TYPE_CHECKING:
    from fugu_cli.config import TelemetrySettings

log = logging.getLogger("fugu")
ENDPOINT_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
INSTALL_HINT = "pip install 'fugu-cli[telemetry]' (opentelemetry-sdk and its OTLP/HTTP exporter)"


def enabled(settings: TelemetrySettings, env: Mapping[str, str] | None = None) -> bool:
    """On when `[telemetry] enabled = true`, or (unset) when an OTLP endpoint variable is set;
    `OTEL_SDK_DISABLED=true` turns it off whatever else says."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if settings.enabled is not None:
        return settings.enabled
    return any(env.get(name) for name in ENDPOINT_VARIABLES)


def observer(settings: TelemetrySettings, pool: Sequence[Worker]) -> Emit | None:
    """What a session hands its events to for export, or None when telemetry is off (or the SDK is not
    installed: said once in the log and on stderr)."""
    if not enabled(settings):
        return None
    try:
        exporter = _Exporter.get(settings)
    except ImportError as e:
        _warn_once(f"telemetry is on but the OpenTelemetry SDK is missing ({e.name}): {INSTALL_HINT}")
        return None
    return TurnTracer(exporter, pool).on_event


_warned: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        log.warning(text)
        import sys

        print(f"fugu: {text}", file=sys.stderr, flush=True)


class _Exporter:
    """The process's tracer and meter, made once (a server's sessions share them), shut down at exit."""

    _made: _Exporter | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls, settings: TelemetrySettings) -> _Exporter:
        with cls._lock:
            if cls._made is None:
                cls._made = cls(settings)
                atexit.register(cls._made.shutdown)
            return cls._made

    def __init__(self, settings: TelemetrySettings) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from fugu_cli import __version__

        protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        if protocol != "http/protobuf":
            _warn_once(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: fugu exports OTLP over HTTP (protobuf) only")
        register_secret_values({v: f"[telemetry header {k}]" for k, v in settings.headers.items()})
        headers = dict(settings.headers) or None
        base = settings.endpoint.rstrip("/") if settings.endpoint else None
        attributes = {"service.version": __version__}
        name = settings.service_name or ("" if os.environ.get("OTEL_SERVICE_NAME") else "fugu")
        if name:  # else the SDK reads OTEL_SERVICE_NAME
            attributes["service.name"] = name
        resource = Resource.create(attributes)
        self.tracer_provider = TracerProvider(resource=resource)
        spans = OTLPSpanExporter(endpoint=f"{base}/v1/traces" if base else None, headers=headers)
        self.tracer_provider.add_span_processor(BatchSpanProcessor(spans))
        self.tracer = self.tracer_provider.get_tracer("fugu", __version__)
        self.meter_provider: Any = None
        if settings.metrics and os.environ.get("OTEL_METRICS_EXPORTER", "") != "none":
            metrics = OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None, headers=headers)
            reader = PeriodicExportingMetricReader(metrics)
            self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        self.metrics = _Metrics(self.meter_provider)

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


class _Metrics:
    """The counters; all no-ops without a meter provider."""

    def __init__(self, provider: Any) -> None:
        meter = provider.get_meter("fugu") if provider is not None else None
        self._counters: dict[str, Any] = {}
        specs = {
            "fugu.cost": ("USD", "what the workers' steps cost"),
            "fugu.tokens": ("{token}", "tokens read and written, by worker and type"),
            "fugu.steps": ("{step}", "LLM calls, by worker and route source"),
            "fugu.failovers": ("{failover}", "steps a worker failed and another took"),
            "fugu.escalations": ("{escalation}", "steps routed to a pricier worker than the step before"),
            "fugu.turns": ("{turn}", "turns, by how they ended"),
        }
        for name, (unit, doc) in specs.items():
            if meter is not None:
                self._counters[name] = meter.create_counter(name, unit=unit, description=doc)

    def add(self, name: str, value: float, **attributes: str) -> None:
        counter = self._counters.get(name)
        if counter is not None and value:
            counter.add(value, attributes)


@dataclass
class _Open:
    span: Any
    worker: str = ""


class TurnTracer:
    """One session's events to spans: turn ⊃ step ⊃ (route, tool calls). Ultra mode's steps emit from
    threads, keyed by their workflow step; a lock keeps the bookkeeping whole."""

    def __init__(self, exporter: Any, pool: Sequence[Worker]) -> None:
        self._tracer = exporter.tracer
        self._metrics: _Metrics = exporter.metrics
        self._prices = {w.name: (w.price_in or 0.0) + (w.price_out or 0.0) for w in pool}
        self._lock = threading.Lock()
        self._turn: Any = None
        self._steps: dict[tuple[int | None, int], _Open] = {}
        self._tools: dict[str, Any] = {}
        self._last_worker: str | None = None

    def on_event(self, event: Event) -> None:
        try:
            with self._lock:
                self._handle(event)
        except Exception as e:  # telemetry must never cost a turn
            log.warning("telemetry failed", exc_info=e)

    def _handle(self, event: Event) -> None:
        scope: int | None = None
        while isinstance(event, WorkflowAgentEvent):
            scope, event = event.step, event.inner
        if isinstance(event, SessionStarted):
            self._start_turn(event)
        elif self._turn is None:
            return
        elif isinstance(event, RouteChosen):
            self._route(scope, event)
        elif isinstance(event, AssistantMessage):
            self._replied(scope, event)
        elif isinstance(event, ProviderFailed):
            self._failed(scope, event)
        elif isinstance(event, ToolStarted):
            self._tool_started(scope, event)
        elif isinstance(event, ToolFinished):
            self._tool_finished(event)
        elif isinstance(event, StepFinished):
            self._step_finished(scope, event)
        elif isinstance(event, Compacted):
            attrs = {"fugu.trigger": event.trigger, "fugu.tokens_before": event.tokens_before}
            self._turn.add_event("fugu.compacted", {**attrs, "fugu.tokens_after": event.tokens_after})
        elif isinstance(event, TurnFinished):
            self._end_turn(event)

    def _start_turn(self, event: SessionStarted) -> None:
        from opentelemetry.context import Context

        self._close_all("a new turn began")
        attrs = {
            "fugu.session_id": event.session_id,
            "fugu.router": event.router,
            "fugu.permission_mode": event.permission_mode,
            "fugu.workers": ",".join(event.workers),
        }
        self._turn = self._tracer.start_span("fugu.turn", context=Context(), attributes=_clean(attrs))
        self._last_worker = None

    def _child(self, name: str, parent: Any, attributes: Mapping[str, Any], start: int | None = None) -> Any:
        from opentelemetry import trace

        ctx = trace.set_span_in_context(parent)
        return self._tracer.start_span(name, context=ctx, attributes=_clean(attributes), start_time=start)

    def _route(self, scope: int | None, event: RouteChosen) -> None:
        key = (scope, event.step)
        if key in self._steps:  # a failover re-routes the same step: the failed attempt's span ends first
            self._end_step(key, error="re-routed")
        d = event.decision
        route = {
            "fugu.worker": d.worker,
            "fugu.route.source": d.source,
            "fugu.route.probability": float(d.scores.get(d.worker, -1.0)),
            "fugu.route.latency_ms": float(d.latency_ms),
            "fugu.route.reason": d.reason,
            **({"fugu.route.role": d.role} if d.role else {}),
        }
        step = self._child("fugu.step", self._turn, {"fugu.step": event.step, **route, **_scope(scope)})
        now = time.time_ns()
        self._child("fugu.route", step, route, start=now - int(d.latency_ms * 1e6)).end(end_time=now)
        self._steps[key] = _Open(step, d.worker)
        if scope is None:
            previous = self._last_worker
            if previous is not None and self._prices.get(d.worker, 0.0) > self._prices.get(previous, 0.0):
                self._metrics.add("fugu.escalations", 1, worker=d.worker)
            self._last_worker = d.worker

    def _replied(self, scope: int | None, event: AssistantMessage) -> None:
        step = self._steps.get((scope, event.step))
        if step is not None and event.model:
            step.span.set_attribute("fugu.model", event.model)

    def _failed(self, scope: int | None, event: ProviderFailed) -> None:
        self._metrics.add("fugu.failovers", 1, worker=event.worker)
        self._end_step((scope, event.step), error=redact(event.error))

    def _tool_started(self, scope: int | None, event: ToolStarted) -> None:
        step = self._steps.get((scope, event.step))
        parent = step.span if step is not None else self._turn
        attrs = {
            "fugu.tool": event.call.name,
            "fugu.tool.target": _target(event.call),
            "fugu.agent": event.worker,
        }
        self._tools[event.call.id] = self._child("fugu.tool", parent, attrs)

    def _tool_finished(self, event: ToolFinished) -> None:
        span = self._tools.pop(event.call.id, None)
        if span is None:
            return
        r = event.result
        span.set_attribute("fugu.tool.is_error", r.is_error)
        span.set_attribute("fugu.tool.denied", r.denied)
        if r.exit_code is not None:
            span.set_attribute("fugu.tool.exit_code", r.exit_code)
        if r.is_error:
            _error(span, "the tool call failed" if not r.denied else "refused")
        span.end()

    def _step_finished(self, scope: int | None, event: StepFinished) -> None:
        u = event.usage
        opened = self._steps.get((scope, event.step))
        if opened is not None:
            opened.span.set_attributes(
                {
                    "fugu.cost_usd": float(u.cost_usd),
                    "fugu.tokens.input": u.prompt_tokens,
                    "fugu.tokens.output": u.completion_tokens,
                    "fugu.tokens.cached": u.cached_tokens,
                    "fugu.tools": ",".join(event.tools),
                }
            )
        self._metrics.add("fugu.steps", 1, worker=event.worker)
        self._metrics.add("fugu.cost", u.cost_usd, worker=event.worker)
        for kind, n in (
            ("input", u.prompt_tokens),
            ("output", u.completion_tokens),
            ("cached", u.cached_tokens),
        ):
            self._metrics.add("fugu.tokens", n, worker=event.worker, type=kind)
        self._end_step((scope, event.step))

    def _end_step(self, key: tuple[int | None, int], error: str | None = None) -> None:
        opened = self._steps.pop(key, None)
        if opened is None:
            return
        if error is not None:
            _error(opened.span, error)
        opened.span.end()

    def _end_turn(self, event: TurnFinished) -> None:
        r = event.result
        self._close_all(None)
        self._turn.set_attributes(
            {
                "fugu.status": r.status,
                "fugu.cost_usd": float(r.usage.cost_usd),
                "fugu.steps": r.num_turns,
                "fugu.duration_api_ms": float(r.duration_api_ms),
            }
        )
        if r.is_error:
            _error(self._turn, redact(r.error or r.status))
        self._turn.end()
        self._turn = None
        self._metrics.add("fugu.turns", 1, status=r.status)

    def _close_all(self, why: str | None) -> None:
        for span in self._tools.values():
            span.end()
        self._tools.clear()
        for key in list(self._steps):
            self._end_step(key, error=why or "the turn ended first")
        if self._turn is not None and why is not None:
            _error(self._turn, why)
            self._turn.end()
            self._turn = None


def _target(call: ToolCall) -> str:
    """What a call acts on: its path, command or pattern (cut to 200 characters)."""
    import json

    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        return ""
    if not isinstance(args, dict):
        return ""
    value = next((args[k] for k in ("path", "command", "pattern") if isinstance(args.get(k), str)), "")
    return str(value)[:200]


def _error(span: Any, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))


def _scope(scope: int | None) -> dict[str, Any]:
    return {"fugu.workflow_step": scope} if scope is not None else {}


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as OpenTelemetry takes them, every text redacted."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in attributes.items() if v is not None}
