"""One request, one trace: the mesh as separate processes exporting OTLP to an in-test receiver, and
Prometheus /metrics on every process.

The OTLP receiver is a gRPC TraceService (opentelemetry-proto) in this test process; the services export to
it because OTEL_EXPORTER_OTLP_ENDPOINT points at it, exactly as they would to a collector.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from ragmesh_common.telemetry import Attr

from .mesh_process import SERVICES, Mesh, Proc, free_port, wait_ready

SERVER, CLIENT = 2, 3  # opentelemetry.proto.trace.v1.Span.SpanKind


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict


def _value(any_value):
    return getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def Export(self, request, context):
        with self._lock:
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for s in scope_spans.spans:
                        self.spans.append(
                            Span(
                                resource.get("service.name", ""),
                                s.name,
                                s.kind,
                                s.trace_id.hex(),
                                s.span_id.hex(),
                                s.parent_span_id.hex(),
                                {a.key: _value(a.value) for a in s.attributes},
                            )
                        )
        return trace_service_pb2.ExportTraceServiceResponse()

    def snapshot(self) -> list[Span]:
        with self._lock:
            return list(self.spans)


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = Receiver()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0)


def _trace_of(receiver: Receiver, predicate, needs, timeout: float = 60) -> list[Span]:
    """The spans of the trace whose root-side span matches `predicate`, once `needs(spans)` holds and every span's
    parent has arrived. Spans arrive in batches, one exporter per service: from several processes, and in
    `ragmesh up` from one process in no set order between its services (a callee's batch can come after its
    caller's root)."""
    deadline = time.monotonic() + timeout
    spans: list[Span] = []
    while time.monotonic() < deadline:
        all_spans = receiver.snapshot()
        roots = [s for s in all_spans if predicate(s)]
        if roots:
            spans = [s for s in all_spans if s.trace_id == roots[-1].trace_id]
            ids = {s.span_id for s in spans}
            if needs(spans) and all(s.parent_id in ids for s in spans if s.parent_id and s is not roots[-1]):
                return spans
        time.sleep(0.2)
    pytest.fail(f"trace incomplete after {timeout}s: {sorted((s.service, s.name) for s in spans)}")


def _edges(spans: list[Span]) -> set[tuple[str, str, str, str]]:
    """(parent service, parent span name, child service, child span name) for every parent -> child edge."""
    by_id = {s.span_id: s for s in spans}
    return {
        (by_id[s.parent_id].service, by_id[s.parent_id].name, s.service, s.name) for s in spans if s.parent_id in by_id
    }


def _a_rest_search(s: Span) -> bool:
    """The gateway's SERVER span of a REST search that succeeded."""
    return (
        s.service == "ragmesh-gateway"
        and s.kind == SERVER
        and s.name.endswith("/search")
        and s.attributes.get("http.response.status_code", s.attributes.get("http.status_code")) == 200
    )


def _crosses(spans: list[Span], caller: str, callee: str, rpc: str) -> bool:
    """A CLIENT span of `caller` is the parent of `callee`'s SERVER span for the RPC."""
    by_id = {s.span_id: s for s in spans}
    return any(
        s.service == callee
        and s.kind == SERVER
        and s.name.endswith(rpc)
        and (p := by_id.get(s.parent_id)) is not None
        and p.service == caller
        and p.kind == CLIENT
        for s in spans
    )


def _child_of(spans: list[Span], service: str, parent_rpc: str, name: str) -> Span | None:
    by_id = {s.span_id: s for s in spans}
    for s in spans:
        if s.service == service and s.name == name:
            parent = by_id.get(s.parent_id)
            # Directly under the server span, or under a span of the same service below it.
            while parent is not None and parent.service == service and not parent.name.endswith(parent_rpc):
                parent = by_id.get(parent.parent_id)
            if parent is not None and parent.name.endswith(parent_rpc):
                return s
    return None


def _server_span(spans: list[Span], service: str, rpc: str) -> Span:
    return next(s for s in spans if s.service == service and s.kind == SERVER and s.name.endswith(rpc))


async def _mcp_searches(url: str, *queries: str) -> None:
    """Several search tool calls in one MCP session."""
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        for query in queries:
            result = await client.call_tool("search", {"query": query, "collection": "traced", "top_k": 2})
            assert not result.is_error, result


def _labels(exposition: str, family: str) -> list[dict[str, str]]:
    """The label sets of one metric family's samples in a Prometheus exposition."""
    return [
        sample.labels for f in text_string_to_metric_families(exposition) if f.name == family for sample in f.samples
    ]


def _ancestors(span: Span, by_id: dict[str, Span]) -> Iterator[Span]:
    while (span := by_id.get(span.parent_id)) is not None:
        yield span


def _start_mesh(tmp_path, otlp_port: int, **env: str) -> tuple[Mesh, list[Proc], dict[str, int]]:
    """converter, embedder, indexer+search (one owner of the embedded store), answer and gateway as five
    processes, each exporting spans to the receiver and serving /metrics on a port of its own."""
    metrics_ports = {name: free_port() for name in SERVICES}
    mesh = Mesh(
        tmp_path / "data",
        extra_env={
            **env,
            "RAGMESH_EMBEDDER_BACKEND": "hash",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_BSP_SCHEDULE_DELAY": "200",  # export batches quickly
            **{f"RAGMESH_{name.upper()}_METRICS_PORT": str(port) for name, port in metrics_ports.items()},
        },
    )
    env = mesh.env()
    groups = [["converter"], ["embedder"], ["indexer", "search"], ["answer"], ["gateway"]]
    procs = [Proc(["serve", *g], env, tmp_path / f"{'-'.join(g)}.log").start() for g in groups]
    return mesh, procs, metrics_ports


def _stop(procs: list[Proc]) -> None:
    codes = [p.stop() for p in procs]
    assert all(code == 0 for code in codes), [(p.args, c, p.log()[-1500:]) for p, c in zip(procs, codes, strict=True)]


def test_one_request_is_one_trace_across_processes_and_every_process_has_metrics(tmp_path, receiver, fake_chat):
    otlp, otlp_port = receiver
    mesh, procs, metrics_ports = _start_mesh(
        tmp_path,
        otlp_port,
        RAGMESH_ANSWER_BASE_URL=fake_chat.url,
        RAGMESH_ANSWER_MODEL="fake-chat",
        RAGMESH_ANSWER_MIN_RELEVANCE="0.1",
    )
    try:
        wait_ready(mesh.url, procs, timeout=120)  # /ready fans out to every gRPC health check
        with httpx.Client(base_url=mesh.url, timeout=60) as http:
            page = (
                b"<html><head><title>Tracing</title></head><body><h1>Tracing</h1>"
                b"<p>Spans follow a request from the gateway through every service.</p></body></html>"
            )
            ingested = http.post(
                "/api/v1/ingest/file",
                files={"file": ("tracing.html", page, "text/html")},
                data={"collection": "traced", "doc_id": "tracing"},
            )
            assert ingested.status_code == 200, ingested.text
            found = http.post(
                "/api/v1/search",
                json={"query": "spans follow a request", "collection": "traced", "top_k": 3, "mode": "hybrid"},
            )
            assert found.status_code == 200, found.text
            assert found.json()["results"][0]["doc_id"] == "tracing"
            bad = http.post("/api/v1/search", json={"query": "x", "collection": "Not Valid!"})
            assert bad.status_code == 400, bad.text
            error_trace_id = bad.json()["error"]["trace_id"]
            missing = http.post("/api/v1/search", json={"query": "x", "collection": "missing"})
            assert missing.status_code == 404, missing.text
            http.get("/ready")
            http.get("/health")
            scraped = {"gateway": http.get("/metrics").text}
        scraped |= {
            name: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text for name, port in metrics_ports.items()
        }

        # --- REST file ingest: gateway -> indexer -> converter and embedder, + store --------------------------
        ingest = _trace_of(
            otlp,
            lambda s: s.service == "ragmesh-gateway" and s.kind == SERVER and "ingest/file" in s.name,
            lambda spans: (
                _crosses(spans, "ragmesh-indexer", "ragmesh-embedder", "Embed")
                and _crosses(spans, "ragmesh-indexer", "ragmesh-converter", "Convert")
                and any(s.name == "store.upsert" for s in spans)
            ),
        )
        assert _crosses(ingest, "ragmesh-gateway", "ragmesh-indexer", "IngestDocument"), _edges(ingest)
        assert len({s.trace_id for s in ingest}) == 1
        upsert = _child_of(ingest, "ragmesh-indexer", "IngestDocument", "store.upsert")
        assert upsert is not None and upsert.attributes[Attr.COLLECTION] == "traced", _edges(ingest)
        document = next(s for s in ingest if s.name == "indexer.ingest_document")
        assert document.attributes[Attr.DOC_ID] == "tracing" and document.attributes[Attr.CHUNK_COUNT] >= 1
        assert document.attributes[Attr.COLLECTION] == "traced" and document.attributes[Attr.STATUS] == "indexed"
        model = next(s for s in ingest if s.service == "ragmesh-embedder" and s.name == "embedder.model")
        assert model.attributes[Attr.BATCH_SIZE] >= 1 and model.attributes[Attr.MODEL]

        # --- REST search: gateway -> search -> embedder, + store ---------------------------------------------
        search = _trace_of(
            otlp,
            _a_rest_search,
            lambda spans: (
                _crosses(spans, "ragmesh-search", "ragmesh-embedder", "Embed")
                and any(s.name == "store.hybrid_evidence" for s in spans)
            ),
        )
        assert _crosses(search, "ragmesh-gateway", "ragmesh-search", "Search"), _edges(search)
        # The default (adaptive) hybrid reads both lists in one batched store call, then the kept hits' payloads.
        assert _child_of(search, "ragmesh-search", "Search", "store.hybrid_evidence") is not None, _edges(search)
        assert _child_of(search, "ragmesh-search", "Search", "store.payloads") is not None, _edges(search)
        served = _server_span(search, "ragmesh-search", "Search")
        assert served.attributes[Attr.COLLECTION] == "traced" and served.attributes[Attr.TOP_K] == 3
        assert served.attributes[Attr.MODE] == "hybrid" and served.attributes[Attr.RESULT_COUNT] >= 1
        assert {s.service for s in search} >= {"ragmesh-gateway", "ragmesh-search", "ragmesh-embedder"}

        # --- the error body names its trace; health checks and probes are not traced --------------------------
        assert len(error_trace_id) == 32 and any(s.trace_id == error_trace_id for s in otlp.snapshot())
        every = otlp.snapshot()
        assert not [
            s.name for s in every if "grpc.health" in s.name or s.name.endswith(("/ready", "/health", "/metrics"))
        ]

        # --- JSON logs carry the trace: the indexer's "indexed" line belongs to the ingest trace --------------
        indexer_log = [json.loads(line) for line in procs[2].log().splitlines() if line.startswith("{")]
        indexed = [e for e in indexer_log if e["message"].startswith("indexed traced/tracing")]
        assert indexed and indexed[0]["trace_id"] == ingest[0].trace_id and len(indexed[0]["span_id"]) == 16

        # --- /metrics on every process --------------------------------------------------------------------------
        assert (
            'ragmesh_http_server_request_duration_seconds_bucket{le="0.005",method="POST",'
            'route="/api/v1/search",status_code="200"}' in scraped["gateway"]
        )
        for name, rpc in {
            "converter": "Convert",
            "embedder": "Embed",
            "indexer": "IngestDocument",
            "search": "Search",
        }.items():
            assert (
                f'grpc_method="{rpc}"' in scraped[name]
                and "ragmesh_grpc_server_handling_seconds_bucket" in scraped[name]
            ), scraped[name][:2000]
            assert "ragmesh_grpc_server_in_flight_requests" in scraped[name]
            assert "grpc.health" not in scraped[name]
        assert 'grpc_code="INVALID_ARGUMENT"' not in scraped["search"]  # the bad request never left the gateway
        codes = {
            labels["grpc_code"]
            for labels in _labels(scraped["search"], "ragmesh_grpc_server_handling_seconds")
            if labels["grpc_method"] == "Search"
        }
        assert codes == {"OK", "NOT_FOUND"}
        embedder = scraped["embedder"]
        assert "ragmesh_embedder_queue_depth 0.0" in embedder
        assert "ragmesh_embedder_batch_size_count" in embedder and "ragmesh_embedder_texts_total" in embedder
        assert "ragmesh_embedder_tokens_total" in embedder
        assert 'ragmesh_indexer_documents_total{status="indexed"} 1.0' in scraped["indexer"]
        assert "ragmesh_indexer_chunks_total" in scraped["indexer"]

        # --- REST ask: gateway -> answer -> search -> embedder, and the chat model's call --------------------------
        _assert_one_ask_is_one_trace(mesh, otlp, fake_chat, metrics_ports["answer"])
    finally:
        _stop(procs)


def test_each_mcp_tool_call_is_one_trace_through_the_same_hops(tmp_path, receiver):
    otlp, otlp_port = receiver
    mesh, procs, _ = _start_mesh(tmp_path, otlp_port)
    try:
        wait_ready(mesh.url, procs, timeout=120)
        ingested = httpx.post(
            f"{mesh.url}/api/v1/ingest",
            timeout=60,
            json={"text": "An MCP tool call is traced like a REST call.", "collection": "traced", "doc_id": "mcp"},
        )
        assert ingested.status_code == 200, ingested.text
        asyncio.run(_mcp_searches(mesh.url, "tool call traced", "traced like a REST call"))

        def searches(spans: list[Span]) -> list[Span]:
            return [
                s for s in spans if s.service == "ragmesh-search" and s.kind == SERVER and s.name.endswith("/Search")
            ]

        def complete(spans: list[Span]) -> bool:
            # Each process exports its own spans in its own batches: wait for the embedder's and the gateway's too
            # (the search spans can arrive before the gateway's that they descend from).
            calls, by_id = searches(spans), {s.span_id: s for s in spans}
            return len(calls) >= 2 and all(
                _crosses([s for s in spans if s.trace_id == c.trace_id], "ragmesh-search", "ragmesh-embedder", "Embed")
                and any(a.name == "POST /mcp" for a in _ancestors(c, by_id))
                for c in calls
            )

        deadline = time.monotonic() + 60
        while not complete(otlp.snapshot()) and time.monotonic() < deadline:
            time.sleep(0.2)
        spans = otlp.snapshot()
        by_id = {s.span_id: s for s in spans}
        calls = searches(spans)
        assert len(calls) == 2, sorted((s.service, s.name) for s in spans)
        # Two tool calls, two traces, each rooted in the POST /mcp that carried it, through the same hops.
        assert len({c.trace_id for c in calls}) == 2
        for call in calls:
            chain = [(a.service, a.name) for a in _ancestors(call, by_id)]
            assert chain[0][0] == "ragmesh-gateway" and chain[-1] == ("ragmesh-gateway", "POST /mcp"), chain
            trace = [s for s in spans if s.trace_id == call.trace_id]
            assert _crosses(trace, "ragmesh-search", "ragmesh-embedder", "Embed"), _edges(trace)
    finally:
        _stop(procs)


def _assert_one_ask_is_one_trace(mesh: Mesh, otlp: Receiver, chat, metrics_port: int) -> None:
    """One ask is one trace through answer, search and embedder with the chat model's call as a gen_ai span,
    and the answer service's metrics count it."""
    with httpx.Client(base_url=mesh.url, timeout=60) as http:
        ingested = http.post(
            "/api/v1/ingest",
            json={
                "text": "Answers are traced from the gateway to the chat model.",
                "collection": "traced",
                "doc_id": "answers",
            },
        )
        assert ingested.status_code == 200, ingested.text
        asked = http.post(
            "/api/v1/ask", json={"query": "are answers traced to the chat model?", "collection": "traced"}
        )
        assert asked.status_code == 200, asked.text
        usage = asked.json()["usage"]
    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text

    spans = _trace_of(
        otlp,
        lambda s: s.service == "ragmesh-gateway" and s.kind == SERVER and s.name.endswith("/ask"),
        lambda spans: (
            _crosses(spans, "ragmesh-search", "ragmesh-embedder", "Embed")
            and any(s.name == "chat fake-chat" for s in spans)
        ),
    )
    assert len({s.trace_id for s in spans}) == 1
    assert _crosses(spans, "ragmesh-gateway", "ragmesh-answer", "Ask"), _edges(spans)
    assert _crosses(spans, "ragmesh-answer", "ragmesh-search", "Search"), _edges(spans)
    model = _child_of(spans, "ragmesh-answer", "Ask", "chat fake-chat")
    assert model is not None and model.kind == CLIENT, _edges(spans)
    attributes = model.attributes
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "fake-chat"
    assert attributes["gen_ai.usage.input_tokens"] == usage["input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"] > 0
    assert attributes["server.address"] == "127.0.0.1" and attributes["server.port"] == chat.port
    served = _server_span(spans, "ragmesh-answer", "Ask")
    assert served.attributes[Attr.GENERATOR] == "model" and served.attributes[Attr.MODEL] == "fake-chat"
    assert served.attributes[Attr.COLLECTION] == "traced" and served.attributes[Attr.RESULT_COUNT] >= 1

    assert {"generator": "model", "le": "0.25"} in _labels(scraped, "ragmesh_answer_time_to_first_token_seconds")
    assert 'ragmesh_answer_tokens_per_answer_count{generator="model"} 1.0' in scraped
    assert f'ragmesh_answer_model_tokens_total{{type="output"}} {float(usage["output_tokens"])}' in scraped


@pytest.mark.parametrize("in_process", ["true", "false"])
def test_ragmesh_up_is_one_trace_with_every_hop_whether_calls_are_in_process_or_not(tmp_path, receiver, in_process):
    """`ragmesh up` serves the calls between its services in process (no loopback gRPC) unless told not to: the
    trace shows the same CLIENT -> SERVER edge for every hop either way, as the separate processes above do, and
    the callee's gRPC metrics count the calls."""
    otlp, otlp_port = receiver
    embedder_metrics = free_port()
    mesh = Mesh(
        tmp_path / "data",
        extra_env={
            "RAGMESH_EMBEDDER_BACKEND": "hash",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "RAGMESH_EMBEDDER_METRICS_PORT": str(embedder_metrics),
            "RAGMESH_IN_PROCESS_CALLS": in_process,
        },
    )
    proc = Proc(["up"], mesh.env(), tmp_path / "up.log").start()
    try:
        wait_ready(mesh.url, [proc], timeout=120)
        with httpx.Client(base_url=mesh.url, timeout=60) as http:
            page = b"<html><body><h1>Tracing</h1><p>Spans follow a request.</p></body></html>"
            ingested = http.post(
                "/api/v1/ingest/file",
                data={"collection": "traced", "doc_id": "tracing"},
                files={"file": ("tracing.html", page, "text/html")},
            )
            assert ingested.status_code == 200, ingested.text
            found = http.post("/api/v1/search", json={"query": "spans follow a request", "collection": "traced"})
            assert found.status_code == 200 and found.json()["results"][0]["doc_id"] == "tracing", found.text
            missing = http.post("/api/v1/search", json={"query": "x", "collection": "missing"})
            assert missing.status_code == 404, missing.text
        ingest = _trace_of(
            otlp,
            lambda s: s.service == "ragmesh-gateway" and s.kind == SERVER and "ingest/file" in s.name,
            lambda spans: (
                _crosses(spans, "ragmesh-indexer", "ragmesh-embedder", "Embed")
                and _crosses(spans, "ragmesh-indexer", "ragmesh-converter", "Convert")
                and _crosses(spans, "ragmesh-gateway", "ragmesh-indexer", "IngestDocument")
            ),
        )
        assert len({s.trace_id for s in ingest}) == 1
        search = _trace_of(
            otlp,
            _a_rest_search,
            lambda spans: (
                _crosses(spans, "ragmesh-search", "ragmesh-embedder", "Embed")
                and _crosses(spans, "ragmesh-gateway", "ragmesh-search", "Search")
                and _child_of(spans, "ragmesh-search", "Search", "store.payloads") is not None
            ),
        )
        assert len({s.trace_id for s in search}) == 1
        scraped = httpx.get(f"http://127.0.0.1:{embedder_metrics}/metrics", timeout=10).text
        embeds = [
            s.value
            for f in text_string_to_metric_families(scraped)
            for s in f.samples
            if s.name == "ragmesh_grpc_server_handling_seconds_count" and s.labels["grpc_method"] == "Embed"
        ]
        assert sum(embeds) >= 2, scraped[:2000]  # the ingest's and the search's
    finally:
        assert proc.stop() == 0, proc.log()[-2000:]
