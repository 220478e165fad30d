"""`store_call`: a blocking store call keeps the caller's trace, in asyncio's own thread pool, in a pool of the
caller's (the indexer's chunk pool) and inline on the caller's thread (the embedded store, which holds the GIL),
so a traced store call is a child of the request's span: one request, one trace; and store failures reach the
caller as the same errors whichever way the call ran."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ragmesh_common.errors import RagmeshError
from ragmesh_common.telemetry import Telemetry
from ragmesh_store import CollectionNotFound, EdgeStore, StoreError
from ragmesh_store.aio import store_call
from ragmesh_store.client import QdrantClientStore


class _Store:
    def document_hash(self, name, doc_id):
        return f"{name}/{doc_id}"


@pytest.mark.parametrize("how", ["asyncio's pool", "own pool", "inline"])
async def test_a_store_call_is_a_child_of_the_callers_span(monkeypatch, how):
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # nothing listens there: do not wait at shutdown
    telemetry = Telemetry("indexer")
    exporter = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = telemetry.traced_store(_Store())
    pool = ThreadPoolExecutor(1) if how == "own pool" else None

    try:
        with telemetry.tracer().start_as_current_span("ingest"):
            assert await store_call(store.document_hash, "docs", "a", executor=pool, inline=how == "inline") == "docs/a"
        spans = {span.name: span for span in exporter.get_finished_spans()}
        call, request = spans["store.document_hash"], spans["ingest"]
        assert call.context.trace_id == request.context.trace_id
        assert call.parent is not None and call.parent.span_id == request.context.span_id
    finally:
        if pool is not None:
            pool.shutdown()
        telemetry.tracer_provider.shutdown()


class _Failing:
    def __init__(self) -> None:
        self.threads: list[int] = []

    def missing(self):
        self.threads.append(threading.get_ident())
        raise CollectionNotFound("gone")

    def broken(self):
        self.threads.append(threading.get_ident())
        raise StoreError("disk full")


@pytest.mark.parametrize("inline", [False, True])
async def test_store_failures_are_the_same_errors_inline_or_in_a_thread(inline):
    store = _Failing()
    with pytest.raises(RagmeshError) as missing:
        await store_call(store.missing, inline=inline)
    assert (missing.value.code, missing.value.reason) == (grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND")
    assert missing.value.metadata == {"collection": "gone"}
    with pytest.raises(RagmeshError) as broken:
        await store_call(store.broken, inline=inline)
    assert (broken.value.code, broken.value.reason) == (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
    assert "disk full" in broken.value.message
    # Inline runs on the caller's (the event loop's) thread; otherwise on a worker.
    assert (set(store.threads) == {threading.get_ident()}) == inline


def test_the_embedded_store_is_called_inline_and_a_qdrant_server_from_a_thread():
    """qdrant-edge holds the GIL while it works; a Qdrant server's calls wait on the network."""
    assert EdgeStore.holds_gil is True
    assert QdrantClientStore.holds_gil is False
