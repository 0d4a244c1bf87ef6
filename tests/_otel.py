"""One OpenTelemetry SDK tracer provider for the test process, with exporters a test plugs in.

A process has one global tracer provider and it can be set only once, so the first test
that asks for spans sets it; its span processor hands each finished span to the exporters
a test has plugged in (none between tests: the spans of other tests are dropped).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Plugboard(SpanExporter):
    """Hands spans to the exporters plugged in at the time (none: dropped)."""

    def __init__(self) -> None:
        self.targets: list[SpanExporter] = []
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            targets = list(self.targets)
        for target in targets:
            target.export(spans)
        return SpanExportResult.SUCCESS

    @contextmanager
    def plugged(self, exporter: SpanExporter) -> Iterator[SpanExporter]:
        with self._lock:
            self.targets.append(exporter)
        try:
            yield exporter
        finally:
            with self._lock:
                self.targets.remove(exporter)


_board: Plugboard | None = None


def board() -> Plugboard:
    """The process's plugboard, the global tracer provider set on first use."""
    global _board
    if _board is None:
        _board = Plugboard()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_board))
        trace.set_tracer_provider(provider)
    return _board


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The spans finished inside the block, in an in-memory exporter."""
    exporter = InMemorySpanExporter()
    with board().plugged(exporter):
        yield exporter
