"""Optional OpenTelemetry spans (the `otel` extra): one server span per request, child of the caller's
`traceparent`. Without it, trace ids still reach the logs (logs.trace_from_header)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from firstfault.service.logs import TraceContext
from firstfault.service.middleware import SpanStarter


def otel_spans(exporter: str) -> SpanStarter:
    """A SpanStarter exporting to `console` or `otlp` (OTEL_EXPORTER_OTLP_* variables configure the latter)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError:
        raise RuntimeError("OpenTelemetry export needs the otel extra: pip install 'firstfault[otel]'") from None
    span_exporter: SpanExporter
    if exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise RuntimeError("OTLP export needs the otel extra: pip install 'firstfault[otel]'") from None
        span_exporter = OTLPSpanExporter()
    else:
        span_exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "firstfault"}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    tracer = provider.get_tracer("firstfault.service")

    @contextmanager
    def start(ctx: TraceContext, name: str) -> Iterator[TraceContext | None]:
        parent = None
        if ctx.parent_id is not None:
            remote = trace.SpanContext(trace_id=int(ctx.trace_id, 16), span_id=int(ctx.parent_id, 16),
                                       is_remote=True, trace_flags=trace.TraceFlags(int(ctx.flags, 16)))
            parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER) as span:
            span_context = span.get_span_context()
            if not span_context.is_valid:
                yield None
                return
            yield TraceContext(format(span_context.trace_id, "032x"), format(span_context.span_id, "016x"),
                               ctx.parent_id, ctx.flags)

    return start
