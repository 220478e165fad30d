"""The shared server plumbing over real gRPC: rich errors both ways, deadlines, health, reflection."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.config import ServiceSettings
from ragmesh_common.deadlines import current_deadline
from ragmesh_common.errors import RagmeshError, from_rpc_error, invalid_argument, unavailable
from ragmesh_common.server import new_server

SERVICE = "test.Echo"
seen_deadlines: list[float | None] = []


async def _unary(request: bytes, context) -> bytes:
    seen_deadlines.append(current_deadline.get())
    if request == b"bad":
        raise invalid_argument("SOMETHING_INVALID", "something is invalid", field="thing", value="bad")
    if request == b"crash":
        raise ValueError("boom")
    return request.upper()


async def _stream(request: bytes, context):
    yield b"one"
    raise invalid_argument("STREAM_BROKE", "the stream broke")


def _register(server: grpc.aio.Server) -> None:
    identity = lambda b: b  # noqa: E731
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(_unary, identity, identity),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream, identity, identity),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


@pytest.fixture
async def echo():
    service = new_server("echo", ServiceSettings(port=0), _register, [SERVICE], domain="echo.ragmesh")
    await service.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
    yield service, channel
    await channel.close()
    await service.stop(0)


async def _call(channel, method: str, payload: bytes, timeout: float = 5):
    return await channel.unary_unary(f"/{SERVICE}/{method}")(payload, timeout=timeout)


async def test_domain_error_arrives_as_rich_status(echo):
    _, channel = echo
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(channel, "Unary", b"bad")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    err = from_rpc_error(info.value)
    assert (err.reason, err.domain, err.message) == ("SOMETHING_INVALID", "echo.ragmesh", "something is invalid")
    assert err.metadata == {"value": "bad"}
    assert [(v.field, v.description) for v in err.field_violations] == [("thing", "something is invalid")]


async def test_unexpected_exception_is_internal_not_unknown(echo):
    _, channel = echo
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _call(channel, "Unary", b"crash")
    err = from_rpc_error(info.value)
    assert err.code == grpc.StatusCode.INTERNAL and err.reason == "INTERNAL_ERROR"
    assert "boom" not in err.message  # internals are logged, not sent


async def test_streaming_error_after_first_message(echo):
    _, channel = echo
    call = channel.unary_stream(f"/{SERVICE}/Stream")(b"x", timeout=5)
    got = []
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for item in call:
            got.append(item)
    assert got == [b"one"]
    assert from_rpc_error(info.value).reason == "STREAM_BROKE"


async def test_handler_sees_the_callers_deadline(echo):
    _, channel = echo
    seen_deadlines.clear()
    assert await _call(channel, "Unary", b"hi", timeout=3) == b"HI"
    # The deadline is absolute (monotonic), so calls made on the caller's behalf inherit what is left.
    assert seen_deadlines[0] is not None
    # gRPC sends the timeout rounded up, so allow a little over the 3 s the caller gave.
    assert 0 < seen_deadlines[0] - time.monotonic() <= 3.5


async def test_client_refuses_a_call_when_the_inherited_deadline_has_passed():
    from grpc_health.v1.health_pb2_grpc import HealthStub

    client = ServiceClient("health", "127.0.0.1:1", HealthStub, timeout=5)
    token = current_deadline.set(time.monotonic() - 1)
    try:
        with pytest.raises(RagmeshError) as info:
            await client.call("Check", health_pb2.HealthCheckRequest())
        assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        current_deadline.reset(token)
        await client.close()


async def test_a_down_service_is_named_in_the_error():
    from grpc_health.v1.health_pb2_grpc import HealthStub

    client = ServiceClient("embedder", "127.0.0.1:1", HealthStub, timeout=2)
    try:
        with pytest.raises(RagmeshError) as info:
            await client.call("Check", health_pb2.HealthCheckRequest())
    finally:
        await client.close()
    err = info.value
    assert err.code == grpc.StatusCode.UNAVAILABLE and err.reason == "SERVICE_UNAVAILABLE"
    assert err.metadata["service"] == "embedder" and "embedder" in err.message


async def test_health_serving_then_not_serving_on_shutdown(echo):
    service, channel = echo
    stub = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=2)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await service.health.enter_graceful_shutdown()
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=2)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_reflection_lists_the_services(echo):
    service, _ = echo

    def list_services() -> set[str]:
        # The reflection client is synchronous, as grpcurl is: run it beside the server's event loop.
        with grpc.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            return set(ProtoReflectionDescriptorDatabase(channel).get_services())

    names = await asyncio.to_thread(list_services)
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


@pytest.mark.slow  # ten seconds of a dead service, by design
async def test_a_service_that_comes_back_is_found_again_within_seconds():
    """gRPC's own reconnect backoff grows towards two minutes: after ten seconds away a restarted service would be
    refused for ~6 s more, and after a minute for ~40 s. Callers cap it, so the mesh heals as soon as it is back."""
    from grpc_health.v1.health_pb2_grpc import HealthStub

    probe = new_server("probe", ServiceSettings(port=0), _register, [SERVICE], domain="echo.ragmesh")
    await probe.start()
    port = probe.port
    await probe.stop(0)  # a port that was just free: nothing listens on it now
    client = ServiceClient("echo", f"127.0.0.1:{port}", HealthStub, timeout=1)

    async def check() -> bool:
        try:
            await client.call("Check", health_pb2.HealthCheckRequest())
            return True
        except RagmeshError as exc:
            assert exc.code == grpc.StatusCode.UNAVAILABLE
            return False

    service = None
    try:
        down_until = time.monotonic() + 10
        while time.monotonic() < down_until:  # callers keep meeting the dead service, and the backoff grows
            assert not await check()
            await asyncio.sleep(0.1)
        service = new_server("echo", ServiceSettings(port=port), _register, [SERVICE], domain="echo.ragmesh")
        await service.start()
        back = time.monotonic()
        while not await check():
            assert time.monotonic() - back < 4, "the restarted service was still refused after 4 s"
            await asyncio.sleep(0.1)
    finally:
        await client.close()
        if service is not None:
            await service.stop(0)


class _Relay(embedder_grpc.EmbedderServiceServicer):
    """GetModelInfo answered by calling the next hop's GetModelInfo (as the indexer's calls reach the embedder),
    or, at the end of the chain, failing with UNAVAILABLE."""

    def __init__(self, downstream: ServiceClient | None = None) -> None:
        self.downstream = downstream
        self.attempts = 0

    async def GetModelInfo(self, request, context):
        self.attempts += 1
        if self.downstream is None:
            raise unavailable("MODEL_LOADING", "the model is still loading")
        return await self.downstream.call("GetModelInfo", request)


async def _serve(name: str, servicer: _Relay):
    def register(server: grpc.aio.Server) -> None:
        embedder_grpc.add_EmbedderServiceServicer_to_server(servicer, server)

    service = new_server(
        name, ServiceSettings(port=0), register, ["ragmesh.embedder.v1.EmbedderService"], domain=f"{name}.ragmesh"
    )
    await service.start()
    return service


def _client(name: str, port: int) -> ServiceClient:
    return ServiceClient(name, f"127.0.0.1:{port}", embedder_grpc.EmbedderServiceStub, timeout=10)


async def test_a_failure_is_retried_at_one_layer_not_at_every_hop():
    """front -> middle -> back, every call idempotent, back always UNAVAILABLE: the middle's channel retries back
    (4 attempts) and tells the front not to retry it again, so back sees 4 calls, not 4 x 4, and the front learns
    of the failure after one round of backoff instead of four. A middle that is unavailable itself (its own
    error, not one passed on) is still retried by the front."""
    back = _Relay()
    back_service = await _serve("back", back)
    to_back = _client("back", back_service.port)
    middle = _Relay(to_back)
    middle_service = await _serve("middle", middle)
    to_middle = _client("middle", middle_service.port)
    try:
        with pytest.raises(RagmeshError) as info:
            await to_middle.call("GetModelInfo", embedder_pb.GetModelInfoRequest())
        assert (middle.attempts, back.attempts) == (1, 4)
        err = info.value
        assert err.code == grpc.StatusCode.UNAVAILABLE and err.reason == "MODEL_LOADING"
        assert err.domain == "back.ragmesh"  # the hop that failed, as the user is told

        middle.downstream = None  # now the middle itself is unavailable: the front's channel retries it
        middle.attempts = back.attempts = 0
        with pytest.raises(RagmeshError):
            await to_middle.call("GetModelInfo", embedder_pb.GetModelInfoRequest())
        assert (middle.attempts, back.attempts) == (4, 0)
    finally:
        await to_middle.close()
        await to_back.close()
        await middle_service.stop(0)
        await back_service.stop(0)


_FREEZE_PROBE = """
import gc, json, weakref
from ragmesh_common.server import freeze_startup_heap

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

garbage = cycle()
gone_at_start = weakref.ref(garbage)
del garbage  # start-up garbage: a cycle nothing refers to
kept = cycle()  # alive for the whole process, like a model or an app
frozen = freeze_startup_heap()
later = cycle()
gone_later = weakref.ref(later)
del later
gc.collect()
print(json.dumps({
    "frozen": frozen,
    "start_up_garbage_freed": gone_at_start() is None,
    "kept_out_of_scans": not any(o is kept for o in gc.get_objects()),
    "later_garbage_freed": gone_later() is None,
}))
"""


@pytest.mark.e2e  # a child process
def test_start_up_objects_leave_the_collectors_scans_and_later_garbage_is_still_freed():
    # In a process of its own: freezing is for the rest of a process's life.
    done = subprocess.run([sys.executable, "-c", _FREEZE_PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["frozen"] > 1000  # the interpreter's and ragmesh_common's own objects, at least
    assert probe == {**probe, "start_up_garbage_freed": True, "kept_out_of_scans": True, "later_garbage_freed": True}


async def test_watch_streams_health_to_clients_that_balance_on_it(echo):
    # gRPC's client-side health checking (healthCheckConfig) watches each replica over Health/Watch.
    service, channel = echo
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
    assert (await stream.read()).status == health_pb2.HealthCheckResponse.SERVING
    await service.health.enter_graceful_shutdown()
    assert (await stream.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    stream.cancel()


async def test_a_replica_that_says_not_serving_gets_no_new_calls():
    # Two replicas behind one client (ipv4:A,B, round robin); the one draining (NOT_SERVING, as on SIGTERM, its
    # port still open) gets no new call: the other serves them all.
    full_name = embedder_pb.DESCRIPTOR.services_by_name["EmbedderService"].full_name

    def replica(name: str):
        async def model_info(request, context):
            return embedder_pb.GetModelInfoResponse(model_id=name)

        def register(server: grpc.aio.Server) -> None:
            handler = grpc.unary_unary_rpc_method_handler(
                model_info,
                embedder_pb.GetModelInfoRequest.FromString,
                embedder_pb.GetModelInfoResponse.SerializeToString,
            )
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler(full_name, {"GetModelInfo": handler}),)
            )

        return new_server(name, ServiceSettings(port=0), register, [full_name], domain="embedder.ragmesh")

    a, b = replica("a"), replica("b")
    await a.start()
    await b.start()
    client = ServiceClient(
        "embedder", f"ipv4:127.0.0.1:{a.port},127.0.0.1:{b.port}", embedder_grpc.EmbedderServiceStub, timeout=5
    )
    try:

        async def served(calls: int) -> set[str]:
            replies = [await client.call("GetModelInfo", embedder_pb.GetModelInfoRequest()) for _ in range(calls)]
            return {r.model_id for r in replies}

        assert await served(10) == {"a", "b"}
        await a.health.enter_graceful_shutdown()
        # Once the client has heard it on its Watch stream, every call goes to b (none fails meanwhile).
        while await served(2) != {"b"}:
            pass
        assert await served(20) == {"b"}
    finally:
        await client.close()
        await a.stop(0)
        await b.stop(0)
