"""Calls served in process (`ragmesh up`): each case runs the same call over real gRPC and in process, and the
caller must not be able to tell them apart (answers, errors, deadlines, retries, streams, metrics, spans)."""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from ragmesh.embedder.v1 import embedder_service_pb2 as pb
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb_grpc
from ragmesh_common import inprocess, telemetry
from ragmesh_common.clients import ServiceClient
from ragmesh_common.config import ServiceSettings
from ragmesh_common.deadlines import current_deadline
from ragmesh_common.errors import RagmeshError, invalid_argument, unavailable
from ragmesh_common.loop import loop_name, run
from ragmesh_common.server import new_server

TRANSPORTS = ("grpc", "in_process")
caller_mark: contextvars.ContextVar[str] = contextvars.ContextVar("caller_mark", default="")


class _Servicer(pb_grpc.EmbedderServiceServicer):
    """Embed answers "dim" = the number of texts, or fails by the first text; EmbedStream echoes each request's
    id and breaks on "bad"; GetModelInfo is unavailable (or relays to `downstream`)."""

    def __init__(self) -> None:
        self.requests: list = []
        self.deadlines: list[float | None] = []
        self.cancelled = asyncio.Event()
        self.stream_closed = asyncio.Event()
        self.downstream: ServiceClient | None = None
        self.info_attempts = 0

    async def Embed(self, request, context):
        self.requests.append(request)
        self.deadlines.append(current_deadline.get())
        current_deadline.set(0.0)  # a callee's own context must not leak back to its caller
        caller_mark.set("callee")
        match request.texts[0] if request.texts else "":
            case "bad":
                raise invalid_argument("TEXT_INVALID", "the text is invalid", field="texts[0]", index=0)
            case "busy":
                raise RagmeshError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    "QUEUE_FULL",
                    "the queue is full",
                    metadata={"queue": "7"},
                    retry_after=1.5,
                )
            case "crash":
                raise ValueError("boom")
            case "slow":
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    self.cancelled.set()
                    raise
        return pb.EmbedResponse(dimension=len(request.texts), model=caller_mark.get())

    async def EmbedStream(self, request_iterator, context):
        try:
            async for request in request_iterator:
                if request.texts and request.texts[0] == "bad":
                    raise invalid_argument("TEXT_INVALID", "the text is invalid")
                yield pb.EmbedStreamResponse(request_id=request.request_id)
        finally:
            self.stream_closed.set()

    async def GetModelInfo(self, request, context):
        self.info_attempts += 1
        if self.downstream is None:
            raise unavailable("MODEL_LOADING", "the model is still loading")
        return await self.downstream.call("GetModelInfo", request)


async def _start(name: str, servicer: _Servicer, transport: str):
    service = new_server(
        name,
        ServiceSettings(port=0),
        lambda s: pb_grpc.add_EmbedderServiceServicer_to_server(servicer, s),
        ["ragmesh.embedder.v1.EmbedderService"],
        domain=f"{name}.ragmesh",
    )
    await service.start()
    if transport == "in_process":
        service.serve_in_process(f"127.0.0.1:{service.port}")
    return service


def _client(name: str, service, **kwargs) -> ServiceClient:
    return ServiceClient(
        name,
        f"127.0.0.1:{service.port}",
        pb_grpc.EmbedderServiceStub,
        **{"timeout": 10, **kwargs},
    )


@pytest.fixture(params=TRANSPORTS)
async def mesh(request):
    servicer = _Servicer()
    service = await _start("callee", servicer, request.param)
    client = _client("callee", service, caller="caller")
    yield request.param, servicer, client, service
    await client.close()
    await service.stop(0)


async def _embed(client: ServiceClient, *texts: str, timeout: float | None = None):
    return await client.call("Embed", pb.EmbedRequest(texts=list(texts)), timeout=timeout)


async def test_the_answer_comes_from_the_callee_and_in_process_skips_the_wire(mesh):
    transport, servicer, client, _ = mesh
    caller_mark.set("caller")
    request = pb.EmbedRequest(texts=["a", "b"])
    response = await client.call("Embed", request)
    assert response.dimension == 2
    assert response.model == "callee"  # the callee's context is its own, set or copied
    # The callee got the caller's own message only when nothing was serialised in between.
    assert (servicer.requests[0] is request) == (transport == "in_process")
    assert caller_mark.get() == "caller" and current_deadline.get() is None  # nothing leaked back


@pytest.mark.parametrize("text", ["bad", "busy", "crash"])
async def test_errors_reach_the_caller_as_over_grpc(text):
    """Reason, domain, metadata, field violations and retry-after, or INTERNAL without the exception's text."""
    seen = {}
    for transport in TRANSPORTS:
        service = await _start("callee", _Servicer(), transport)
        client = _client("callee", service)
        try:
            with pytest.raises(RagmeshError) as info:
                await _embed(client, text)
        finally:
            await client.close()
            await service.stop(0)
        err = info.value
        seen[transport] = (
            err.code,
            err.reason,
            err.message,
            err.domain,
            dict(err.metadata),
            list(err.field_violations),
            err.retry_after,
            err.retried,
        )
    assert seen["in_process"] == seen["grpc"]
    code, reason, message, domain, *_ = seen["grpc"]
    assert domain == "callee.ragmesh"
    if text == "crash":
        assert (code, reason) == (grpc.StatusCode.INTERNAL, "INTERNAL_ERROR") and "boom" not in message


async def test_the_callee_sees_the_deadline_and_is_cancelled_when_it_passes(mesh):
    transport, servicer, client, _ = mesh
    started = time.monotonic()  # the clock `current_deadline` is on, over gRPC and in process
    await _embed(client, "a", timeout=5)
    assert servicer.deadlines[0] == pytest.approx(started + 5, abs=0.5)
    with pytest.raises(RagmeshError) as info:
        await _embed(client, "slow", timeout=0.3)
    err = info.value
    assert (err.code, err.reason, err.metadata["service"]) == (
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "DEADLINE_EXCEEDED",
        "callee",
    )
    await asyncio.wait_for(servicer.cancelled.wait(), 5)  # the callee stops working on it


async def test_an_unavailable_idempotent_call_is_retried_once_per_layer():
    """front -> middle -> back, back UNAVAILABLE: the middle retries back 4 times and pushes back, so the front
    does not retry again: 1 x 4 calls, not 4 x 4, in process as over gRPC. A middle that fails itself is retried."""
    for transport in TRANSPORTS:
        back, middle = _Servicer(), _Servicer()
        back_service = await _start("back", back, transport)
        middle.downstream = _client("back", back_service)
        middle_service = await _start("middle", middle, transport)
        front = _client("middle", middle_service)
        try:
            with pytest.raises(RagmeshError) as info:
                await front.call("GetModelInfo", pb.GetModelInfoRequest())
            assert (middle.info_attempts, back.info_attempts) == (1, 4), transport
            assert (info.value.reason, info.value.domain, info.value.retried) == ("MODEL_LOADING", "back.ragmesh", True)
            middle.downstream, middle.info_attempts, back.info_attempts = None, 0, 0
            with pytest.raises(RagmeshError):
                await front.call("GetModelInfo", pb.GetModelInfoRequest())
            assert (middle.info_attempts, back.info_attempts) == (4, 0), transport
        finally:
            await front.close()
            await middle_service.stop(0)
            await back_service.stop(0)


async def test_a_stream_answers_each_request_then_fails_with_the_callees_error(mesh):
    transport, servicer, client, _ = mesh
    requests = [pb.EmbedStreamRequest(request_id=str(i), texts=["x"]) for i in range(3)]
    assert [r.request_id async for r in client.stream("EmbedStream", iter(requests))] == ["0", "1", "2"]
    got = []
    with pytest.raises(RagmeshError) as info:
        async for response in client.stream(
            "EmbedStream", iter([*requests[:2], pb.EmbedStreamRequest(request_id="2", texts=["bad"])])
        ):
            got.append(response.request_id)
    assert got == ["0", "1"] and (info.value.reason, info.value.domain) == ("TEXT_INVALID", "callee.ragmesh")


async def test_a_caller_that_stops_reading_a_stream_ends_it_in_the_callee(mesh):
    transport, servicer, client, _ = mesh

    async def endless():
        i = 0
        while True:
            yield pb.EmbedStreamRequest(request_id=str(i))
            i += 1
            await asyncio.sleep(0)

    responses = client.stream("EmbedStream", endless())
    assert (await anext(responses)).request_id == "0"
    await responses.aclose()
    await asyncio.wait_for(servicer.stream_closed.wait(), 5)


async def test_a_message_over_the_callers_limit_is_refused_before_it_is_sent():
    seen = {}
    for transport in TRANSPORTS:
        servicer = _Servicer()
        service = await _start("callee", servicer, transport)
        client = _client("callee", service, max_message_bytes=1024)
        try:
            with pytest.raises(RagmeshError) as info:
                await _embed(client, "x" * 2000)
            assert await _embed(client, "x" * 100)  # under the limit: served
            with pytest.raises(RagmeshError) as streamed:  # each message of a request stream too
                [
                    r
                    async for r in client.stream(
                        "EmbedStream",
                        iter([pb.EmbedStreamRequest(request_id="0"), pb.EmbedStreamRequest(texts=["x" * 2000])]),
                    )
                ]
        finally:
            await client.close()
            await service.stop(0)
        seen[transport] = (info.value.code, info.value.reason, len(servicer.requests))
        # A streamed message over the limit fails the call both ways; gRPC's core reports it as INTERNAL
        # ("Internal error from Core"), in process it is named.
        assert streamed.value.code == (
            grpc.StatusCode.RESOURCE_EXHAUSTED if transport == "in_process" else grpc.StatusCode.INTERNAL
        ), streamed.value
    assert seen["in_process"] == seen["grpc"] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED", 1)


async def test_the_callees_request_metrics_count_calls_served_in_process(mesh):
    transport, _, client, _ = mesh
    registry = telemetry.setup_telemetry("callee").registry

    def count(code: str) -> float:
        return (
            registry.get_sample_value(
                "ragmesh_grpc_server_handling_seconds_count",
                {"grpc_service": "ragmesh.embedder.v1.EmbedderService", "grpc_method": "Embed", "grpc_code": code},
            )
            or 0
        )

    before = count("OK"), count("INVALID_ARGUMENT")
    await _embed(client, "a")
    with pytest.raises(RagmeshError):
        await _embed(client, "bad")
    expected = (before[0] + 1, before[1] + 1)
    # Over gRPC the error reaches the caller as the handler aborts, a moment before the callee's metrics record it
    # (CI once read the count in between): wait up to a second for it.
    for _ in range(100):
        if (count("OK"), count("INVALID_ARGUMENT")) == expected:
            break
        await asyncio.sleep(0.01)
    assert (count("OK"), count("INVALID_ARGUMENT")) == expected


def test_on_uvloop_the_callees_latency_is_measured_and_its_deadline_is_on_the_monotonic_clock(monkeypatch):
    """uvloop's `loop.time()` counts whole milliseconds as of the start of the loop's iteration: a call served
    within one iteration would be recorded as lasting 0 s. `ragmesh up` runs on uvloop where it is installed."""
    pytest.importorskip("uvloop", reason="uvloop is not installed here (no Windows build)")
    monkeypatch.setenv("RAGMESH_EVENT_LOOP", "uvloop")
    servicer = _Servicer()
    registry = telemetry.setup_telemetry("callee-on-uvloop").registry

    async def calls() -> tuple[str, float]:
        service = await _start("callee-on-uvloop", servicer, "in_process")
        client = _client("callee-on-uvloop", service)
        try:
            started = time.monotonic()
            for _ in range(20):
                await _embed(client, "a", timeout=5)
            return loop_name(asyncio.get_running_loop()), started
        finally:
            await client.close()
            await service.stop(0)

    with ThreadPoolExecutor(1) as pool:  # as `ragmesh up` runs it, on a thread of its own (see test_common_loop)
        loop, started = pool.submit(run, calls()).result()
    assert loop == "uvloop" and len(servicer.deadlines) == 20
    assert all(d == pytest.approx(started + 5, abs=0.5) for d in servicer.deadlines)
    labels = {"grpc_service": "ragmesh.embedder.v1.EmbedderService", "grpc_method": "Embed", "grpc_code": "OK"}
    assert registry.get_sample_value("ragmesh_grpc_server_handling_seconds_count", labels) == 20
    assert registry.get_sample_value("ragmesh_grpc_server_handling_seconds_sum", labels) > 0


async def test_a_stopping_service_is_called_over_grpc_again(mesh):
    transport, servicer, client, service = mesh
    await service.stop(0)
    assert inprocess.served(client.target) is None
    with pytest.raises(RagmeshError) as info:  # the stopped server refuses, as it does over gRPC
        await _embed(client, "a", timeout=1)
    assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    assert servicer.requests == []


async def test_one_trace_with_the_same_spans_in_process_as_over_grpc(monkeypatch):
    """The caller's CLIENT span and the callee's SERVER span under it, with gRPC's names and attributes."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # nothing listens there: do not wait at shutdown
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    exporter = InMemorySpanExporter()
    for name in ("trace-caller", "trace-callee"):
        traced = telemetry.Telemetry(name)
        traced.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        monkeypatch.setitem(telemetry._services, name, traced)
    seen = {}
    try:
        for transport in TRANSPORTS:
            exporter.clear()
            service = await _start("trace-callee", _Servicer(), transport)
            client = _client("trace-callee", service, caller="trace-caller")
            tracer = telemetry.setup_telemetry("trace-caller").tracer()
            try:
                with tracer.start_as_current_span("request") as root:
                    await _embed(client, "a")
                    with pytest.raises(RagmeshError):
                        await _embed(client, "bad")
            finally:
                await client.close()
                await service.stop(0)
            spans = exporter.get_finished_spans()
            assert {s.context.trace_id for s in spans} == {root.get_span_context().trace_id}, transport
            by_id = {s.context.span_id: s for s in spans}
            seen[transport] = sorted(
                (
                    s.name,
                    s.kind.name,
                    s.resource.attributes["service.name"],
                    by_id[s.parent.span_id].kind.name if s.parent and s.parent.span_id in by_id else None,
                    s.attributes.get("rpc.service"),
                    s.attributes.get("rpc.method"),
                    s.attributes.get("rpc.grpc.status_code"),
                    s.status.status_code.name,
                )
                for s in spans
                if s.name != "request"
            )
    finally:
        for name in ("trace-caller", "trace-callee"):
            telemetry._services[name].tracer_provider.shutdown()
    assert seen["in_process"] == seen["grpc"]
    path = "/ragmesh.embedder.v1.EmbedderService/Embed"
    assert (path, SpanKind.SERVER.name, "ragmesh-trace-callee", SpanKind.CLIENT.name) in [s[:4] for s in seen["grpc"]]
