"""`store_call`: a blocking store call off the event loop keeps the caller's trace, in asyncio's own thread pool
and in a pool of the caller's (the indexer's chunk pool), so a traced store call is a child of the request's
span: one request, one trace."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ragmesh_common.telemetry import Telemetry
from ragmesh_store.aio import store_call


class _Store:
    def document_hash(self, name, doc_id):
        return f"{name}/{doc_id}"


@pytest.mark.parametrize("own_pool", [False, True])
async def test_a_store_call_off_the_loop_is_a_child_of_the_callers_span(monkeypatch, own_pool):
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # nothing listens there: do not wait at shutdown
    telemetry = Telemetry("indexer")
    exporter = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = telemetry.traced_store(_Store())
    pool = ThreadPoolExecutor(1) if own_pool else None

    try:
        with telemetry.tracer().start_as_current_span("ingest"):
            assert await store_call(store.document_hash, "docs", "a", executor=pool) == "docs/a"
        spans = {span.name: span for span in exporter.get_finished_spans()}
        call, request = spans["store.document_hash"], spans["ingest"]
        assert call.context.trace_id == request.context.trace_id
        assert call.parent is not None and call.parent.span_id == request.context.span_id
    finally:
        if pool is not None:
            pool.shutdown()
        telemetry.tracer_provider.shutdown()
