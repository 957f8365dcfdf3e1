"""Fixtures of the telemetry tests: the spans a run's observer makes, kept in memory."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stepline.engine import _runner
from stepline.telemetry._spans import SpanObserver


class Spans:
    """The spans ended so far, and a way to start a new process's observer (a resume in another process)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self._monkeypatch = monkeypatch
        self.new_process()

    def new_process(self) -> None:
        """Observe with a fresh observer: nothing known of any run but what its journal says."""
        self._monkeypatch.setattr(_runner, "_observers", [SpanObserver(self.provider)])

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} in {[s.name for s in self.all()]}"
        return found[0]

    def where(self, test: Callable[[ReadableSpan], bool]) -> list[ReadableSpan]:
        return [span for span in self.all() if test(span)]


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Spans:
    """Every run the test drives is observed; its spans end up here."""
    return Spans(monkeypatch)
