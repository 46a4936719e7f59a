"""Tracing across the hops: OpenTelemetry spans joined by W3C trace context (`traceparent`) in HTTP headers
and Kafka record headers, so one job's path through gateway, scheduler, worker and projector can be followed.

Why this shape:
- Only a *sampled* context travels. The gateway puts a `traceparent` on the records it produces only when
  its request span is sampled (the caller's `traceparent` had the sampled flag, or SPOTREEL_TRACE_SAMPLE
  picked it); the scheduler and projector start a span only for a record that carries the header. A process
  that sees no header pays a truthiness check of the record's headers and nothing else: the scheduler
  handles thousands of commands a second.
- Sampling: SPOTREEL_TRACE_SAMPLE is the ratio of new traces (requests without a sampled `traceparent`) the
  gateway starts; default 0, so only callers that send a sampled `traceparent` are traced. A sampled parent
  is always followed (ParentBased), so one decision at the edge holds along the whole path.
- Export: one JSON line per ended span into the process's log (logger `spotreel.trace`), unless an OTLP
  collector is configured (SPOTREEL_OTLP_ENDPOINT, e.g. http://127.0.0.1:4318/v1/traces) and the optional
  `opentelemetry-exporter-otlp-proto-http` package is installed. No collector is started by spotreel.

The pure helpers (`traceparent_of`, `parse`, `with_traceparent`) know nothing of OpenTelemetry and are what
the hot paths call first.
"""

from __future__ import annotations

import json
import logging
import os
import re
from contextlib import contextmanager
from typing import Any, Iterable, Mapping

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

TRACEPARENT = "traceparent"
TRACE_ID_HEADER = "X-Trace-Id"
SAMPLE_ENV = "SPOTREEL_TRACE_SAMPLE"
OTLP_ENV = "SPOTREEL_OTLP_ENDPOINT"

_FORMAT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
log = logging.getLogger("spotreel.trace")
_state: dict[str, Any] = {"ratio": 0.0, "service": None}


# -- pure helpers ----------------------------------------------------------------------------------------------

def traceparent_of(headers: Iterable[tuple[str, Any]] | Mapping[str, Any] | None) -> str | None:
    """The `traceparent` of Kafka record headers (a list of (key, bytes) pairs, or a mapping), or None."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key == TRACEPARENT:
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("ascii", "replace")
            return value if parse(value) is not None else None
    return None


def parse(traceparent: str | None) -> tuple[str, str, bool] | None:
    """(trace id, parent span id, sampled) of a W3C traceparent, or None if it is not a valid one (version
    ff, an all-zero trace or span id, or anything that does not match the format)."""
    if not traceparent:
        return None
    m = _FORMAT.match(traceparent.strip().lower())
    if m is None:
        return None
    version, trace_id, span_id, flags = m.groups()
    if version == "ff" or trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return trace_id, span_id, bool(int(flags, 16) & 1)


def trace_id_of(traceparent: str | None) -> str | None:
    parsed = parse(traceparent)
    return parsed[0] if parsed else None


def with_traceparent(headers: list[tuple[str, bytes]] | None, traceparent: str | None) -> list | None:
    """`headers` plus the traceparent (a new list; the given one is not changed); `headers` itself if there
    is no traceparent."""
    if traceparent is None:
        return headers
    return [*(headers or ()), (TRACEPARENT, traceparent.encode())]


def format_traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


# -- OpenTelemetry ------------------------------------------------------------------------------------------

class _LogExporter:
    """Every ended span as one JSON line in the process's log: enough to grep a trace id across the logs
    of gateway, scheduler, worker and projector without a collector."""

    def export(self, spans) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        for s in spans:
            ctx = s.context
            parent = s.parent
            log.info("span %s", json.dumps({
                "trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}",
                "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
                "name": s.name, "service": s.resource.attributes.get("service.name"),
                "start_ns": s.start_time, "duration_ms": round((s.end_time - s.start_time) / 1e6, 3),
                "attributes": dict(s.attributes or {}), "status": s.status.status_code.name},
                separators=(",", ":"), default=str))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def sample_ratio(env: Mapping[str, str] | None = None) -> float:
    raw = (env if env is not None else os.environ).get(SAMPLE_ENV, "").strip()
    if not raw:
        return 0.0
    try:
        ratio = float(raw)
    except ValueError:
        raise ValueError(f"{SAMPLE_ENV} must be a ratio between 0 and 1, not {raw!r}") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"{SAMPLE_ENV} must be a ratio between 0 and 1, not {raw!r}")
    return ratio


def setup(service: str, env: Mapping[str, str] | None = None) -> None:
    """Install the SDK's tracer provider for this process (once; a second call only logs). Spans end up in
    the log, or at the OTLP collector SPOTREEL_OTLP_ENDPOINT names."""
    if _state["service"] is not None:
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    env = env if env is not None else os.environ
    ratio = sample_ratio(env)
    provider = TracerProvider(resource=Resource.create({"service.name": f"spotreel-{service}"}),
                              sampler=ParentBased(TraceIdRatioBased(ratio)))
    endpoint = env.get(OTLP_ENV, "").strip()
    where = "log (logger spotreel.trace)"
    if endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("%s=%s but opentelemetry-exporter-otlp-proto-http is not installed: spans go to the log",
                        OTLP_ENV, endpoint)
        else:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
            where = f"OTLP {endpoint}"
    if where.startswith("log"):
        provider.add_span_processor(SimpleSpanProcessor(_LogExporter()))
    trace.set_tracer_provider(provider)
    _state.update(ratio=ratio, service=service)
    log.info("tracing: %s, new traces sampled at %s, sampled parents followed", where, ratio)


def samples_new_traces() -> bool:
    return _state["ratio"] > 0.0


def tracer():
    """One tracer per process (getting one costs more than a span; a proxy until `setup` installs the SDK)."""
    found = _state.get("tracer")
    if found is None:
        found = _state["tracer"] = trace.get_tracer("spotreel")
    return found


def context_of(traceparent: str | None):
    """An OpenTelemetry context whose parent is the given traceparent (None: a context with no parent)."""
    parsed = parse(traceparent)
    if parsed is None:
        return None
    trace_id, span_id, sampled = parsed
    parent = SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT))
    return trace.set_span_in_context(NonRecordingSpan(parent))


def start_span(name: str, traceparent: str | None, kind: SpanKind = SpanKind.CONSUMER,
               attributes: Mapping[str, Any] | None = None, start_time: int | None = None):
    """A span that continues `traceparent` (a record's header). End it with `.end()`."""
    return tracer().start_span(name, context=context_of(traceparent), kind=kind, attributes=attributes,
                               start_time=start_time)


def traceparent_for(span) -> str | None:
    """The traceparent to hand on from `span`, only if it is sampled (an unsampled context never travels)."""
    ctx = span.get_span_context()
    if not ctx.is_valid or not ctx.trace_flags.sampled:
        return None
    return format_traceparent(ctx)


def current_traceparent() -> str | None:
    """The sampled traceparent of the current span (an HTTP request's, in the gateway), or None."""
    return traceparent_for(trace.get_current_span())


def kafka_headers(headers: list[tuple[str, bytes]] | None = None) -> list | None:
    """Record headers for a record produced now: `headers` plus the current span's traceparent if sampled."""
    return with_traceparent(headers, current_traceparent())


@contextmanager
def joined(name: str, traceparent: str | None, attributes: Mapping[str, Any] | None = None):
    """The current span for the block, continuing `traceparent`; nothing at all when it is None."""
    if traceparent is None:
        yield None
        return
    with tracer().start_as_current_span(name, context=context_of(traceparent), kind=SpanKind.CONSUMER,
                                        attributes=attributes) as span:
        yield span


@contextmanager
def child(name: str, attributes: Mapping[str, Any] | None = None):
    """A child of the current span for the block, only when the current span is recorded (a traced job)."""
    if not trace.get_current_span().is_recording():
        yield None
        return
    with tracer().start_as_current_span(name, attributes=attributes) as span:
        yield span
