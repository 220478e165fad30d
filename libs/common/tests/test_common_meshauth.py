"""The optional shared secret between services (RAGMESH_MESH_TOKEN) over real gRPC: a caller without it (or with
another) is refused with UNAUTHENTICATED MESH_TOKEN_INVALID on unary and streaming calls, ServiceClient sends it,
and health checks stay open for Kubernetes' probes."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.config import ConfigError, ServiceSettings
from ragmesh_common.errors import from_rpc_error
from ragmesh_common.meshauth import METADATA_KEY, mesh_token
from ragmesh_common.server import new_server

from .test_common_server import SERVICE, _register

TOKEN = "a-shared-secret-of-the-mesh"


class _EchoStub:
    """What ServiceClient expects of a generated stub, for the test's echo service."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.Unary = channel.unary_unary(f"/{SERVICE}/Unary")


@pytest.fixture
async def guarded(monkeypatch):
    monkeypatch.setenv("RAGMESH_MESH_TOKEN", TOKEN)
    service = new_server("echo", ServiceSettings(port=0), _register, [SERVICE], domain="echo.ragmesh")
    await service.start()
    yield f"127.0.0.1:{service.port}"
    await service.stop(0)


async def test_calls_without_the_token_are_refused_and_health_stays_open(guarded):
    async with grpc.aio.insecure_channel(guarded) as channel:
        for metadata in ((), ((METADATA_KEY, "not-the-token"),)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary(f"/{SERVICE}/Unary")(b"hi", timeout=5, metadata=metadata)
            error = from_rpc_error(refused.value)
            assert (error.code, error.reason, error.domain) == (
                grpc.StatusCode.UNAUTHENTICATED,
                "MESH_TOKEN_INVALID",
                "echo.ragmesh",
            )
            assert "RAGMESH_MESH_TOKEN" in error.message and TOKEN not in error.message
        stream = channel.unary_stream(f"/{SERVICE}/Stream")(b"x", timeout=5)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            [reply async for reply in stream]
        assert from_rpc_error(refused.value).reason == "MESH_TOKEN_INVALID"
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert (
            await channel.unary_unary(f"/{SERVICE}/Unary")(b"hi", timeout=5, metadata=((METADATA_KEY, TOKEN),)) == b"HI"
        )


async def test_service_client_sends_the_token(guarded):
    # ServiceClient derives the service name from a generated stub's module; borrow one and call the echo method.
    from ragmesh.embedder.v1.embedder_service_pb2_grpc import EmbedderServiceStub

    client = ServiceClient("echo", guarded, EmbedderServiceStub, timeout=5)
    try:
        client.stub = _EchoStub(client.channel)
        assert await client.call("Unary", b"hello") == b"HELLO"
    finally:
        await client.close()


def test_a_short_token_is_a_start_up_error_that_does_not_echo_it(monkeypatch):
    monkeypatch.setenv("RAGMESH_MESH_TOKEN", "short")
    with pytest.raises(ConfigError) as refused:
        mesh_token()
    assert "RAGMESH_MESH_TOKEN" in str(refused.value.code) and "short" not in str(refused.value.code)
