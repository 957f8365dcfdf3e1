"""An OTLP/HTTP trace receiver on loopback: decodes each protobuf ExportTraceServiceRequest into plain spans."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


@dataclass
class Span:
    """One received span, its ids in hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: int
    start: int
    end: int
    status: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]
    links: list[str] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


class Receiver:
    """The spans received so far (every export request decoded)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self.url = ""

    def take(self, body: bytes, path: str) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.spans.append(Span(
                            name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex() or None, kind=span.kind,
                            start=span.start_time_unix_nano, end=span.end_time_unix_nano, status=span.status.code,
                            attributes=_attributes(span.attributes),
                            events=[(e.name, _attributes(e.attributes)) for e in span.events], resource=resource,
                            links=[link.span_id.hex() for link in span.links]))

    def named(self, name: str) -> list[Span]:
        with self._lock:
            return [span for span in self.spans if span.name == name]

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.take(body, self.path)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
