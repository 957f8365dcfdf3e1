"""The tracer provider the ``OTEL_*`` variables describe: resource, exporters, batching.

The SDK reads most variables itself (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the exporter's endpoint,
headers, timeout, compression and certificates, ``OTEL_BSP_*``); this picks the exporters
(``OTEL_TRACES_EXPORTER``: ``otlp``, the default, ``console`` or ``none``) and the OTLP protocol
(``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL``: only ``http/protobuf``, which every
collector takes, on port 4318). The provider's spans are sent in the background, the rest when the process exits.
"""

from __future__ import annotations

import os
import sys

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

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
    return OTLPSpanExporter()
