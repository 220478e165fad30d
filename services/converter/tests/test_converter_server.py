"""The converter's server answers gRPC health checks and reflection, as grpcurl and Kubernetes expect."""

from __future__ import annotations

import asyncio

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

SERVICE = "ragmesh.converter.v1.ConverterService"


async def test_health_reports_serving(start_converter):
    _, service = await start_converter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in (SERVICE, ""):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_health_goes_not_serving_on_shutdown(start_converter):
    _, service = await start_converter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel:
        await service.health.enter_graceful_shutdown()  # the first step of Service.stop()
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=10
        )
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def _reflect(port: int) -> tuple[list[str], list[str]]:
    """Blocking reflection client (it is sync), so it runs in a thread while the server serves."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = database.get_services()
        descriptor = database.FindFileContainingSymbol(SERVICE)
        return services, [method.name for method in descriptor.service[0].method]


async def test_reflection_describes_the_service(start_converter):
    _, service = await start_converter()
    services, methods = await asyncio.to_thread(_reflect, service.port)
    assert SERVICE in services
    assert "grpc.health.v1.Health" in services
    assert methods == ["Convert", "ConvertStream"]
