"""The tracer provider the ``OTEL_*`` variables describe: resource, exporters, batching.

The SDK reads most variables itself (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the exporter's endpoint,
headers, timeout, compression and certificates, ``OTEL_BSP_*``); this picks the exporters
(``OTEL_TRACES_EXPORTER``: ``otlp``, the default, ``console`` or ``none``) and the OTLP protocol
(``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL``: only ``http/protobuf``, which every
collector takes, on port 4318). The provider's spans are sent in the background, the rest when the process exits;
a collector that does not take them is said once, in one line, in place of the SDK's log records.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter, SpanExportResult

__all__ = ["provider_from_env"]


def provider_from_env() -> TracerProvider:
    """A tracer provider exporting as the variables say, its service named ``stepline`` unless they name it."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "stepline"}))
    provider = TracerProvider(resource=resource)
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporters() -> list[SpanExporter]:
    names = [n.strip().lower() for n in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            exporters.append(_otlp())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name != "none":
            print(f"note: OTEL_TRACES_EXPORTER names {name!r}, which stepline does not know (otlp, console, none): "
                  "no spans go there", file=sys.stderr)
    return exporters


def _otlp() -> SpanExporter:
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol != "http/protobuf":
        print(f"note: stepline sends spans over OTLP http/protobuf, not {protocol}: give it an endpoint that takes "
              "http/protobuf (a collector's port 4318)", file=sys.stderr)
    return _SaidOnce(OTLPSpanExporter())


class _LastError(logging.Handler):
    """Keeps the exporter's last complaint (its log records would print several long lines per failed batch)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def cause(self) -> str:
        """The cause of the failure: the system's error (connection refused …), the collector's HTTP answer, or
        that none came in time (the exporter names no error when its time ran out before a retry)."""
        for message in self.messages:
            if found := re.search(r"\[Errno -?\d+\] ([^'\")]+)", message):
                return found.group(1).strip()
            if found := re.search(r"code: (\d+), reason: (.{0,120})", message):
                return f"HTTP {found.group(1)}: {found.group(2).strip()}"
        return "no answer within OTEL_EXPORTER_OTLP_TIMEOUT"


class _SaidOnce(SpanExporter):
    """The OTLP exporter, whose failure is said once per process in one line: where, why, what to check."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.said = False
        self.errors = _LastError()
        logger = logging.getLogger("opentelemetry.exporter")
        logger.addHandler(self.errors)
        logger.propagate = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.errors.messages = []
        result = self.inner.export(spans)
        if result is SpanExportResult.FAILURE and not self.said:
            self.said = True
            print(f"note: spans could not be sent to {_endpoint()} ({self.errors.cause()}): is the collector running "
                  "there? (OTEL_EXPORTER_OTLP_ENDPOINT)", file=sys.stderr)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _endpoint() -> str:
    """Where the spans go, as the exporter reads the variables."""
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or "http://localhost:4318"
    return base.rstrip("/") + "/v1/traces"
