"""One gRPC channel per backend, created once, with deadlines on every call and retries only where
AIP-194 allows them (UNAVAILABLE, idempotent methods).

    embedder = ServiceClient("embedder", settings.embedder_addr, EmbedderServiceStub, timeout=30)
    response = await embedder.call("Embed", request)

Which methods are idempotent is the contract's to say: each RPC's `idempotency_level` option in protos/
(IDEMPOTENT or NO_SIDE_EFFECTS), read from the stub's descriptor. Calls that stream requests are not retried.

A failed call raises `RagmeshError` (see `errors.from_rpc_error`). A call made while serving another call
never outlives that call's deadline (`deadlines.current_deadline`). An idempotent call that is still UNAVAILABLE
after its retries is marked `retried`: the service serving the caller passes it on with server pushback, so
the callers above it do not retry it again (one layer of retries, not one per hop).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.descriptor_pb2 import MethodOptions

from . import inprocess
from .deadlines import current_deadline
from .errors import RagmeshError, from_rpc_error
from .meshauth import MeshTokenClientInterceptor, mesh_token
from .reasons import Reason
from .telemetry import setup_telemetry

# Below this much time left there is no point in starting a downstream call.
_MIN_TIMEOUT = 0.05
RECONNECT_BACKOFF_MAX_MS = 2_000  # the longest a caller waits before trying a service that was down again
RETRYABLE = grpc.StatusCode.UNAVAILABLE  # the one code an idempotent call is retried on (AIP-194)


def _service_config(full_service: str, idempotent: Iterable[str]) -> str:
    # round_robin: behind a headless Kubernetes Service, spread calls over every pod (the embedder scales out).
    config: dict[str, object] = {"loadBalancingConfig": [{"round_robin": {}}]}
    # Client-side health checking (grpc.health.v1 Watch of each replica's overall health, ""): a replica that says
    # NOT_SERVING (draining on SIGTERM) gets no new calls, health checks included, while the others take them. A
    # server without the health service (UNIMPLEMENTED) counts as serving.
    config["healthCheckConfig"] = {"serviceName": ""}
    methods = [{"service": full_service, "method": m} for m in idempotent]
    if not methods:
        return json.dumps(config)
    return json.dumps(
        {
            **config,
            "methodConfig": [
                {
                    "name": methods,
                    "retryPolicy": {
                        "maxAttempts": 4,
                        "initialBackoff": "0.1s",
                        "maxBackoff": "2s",
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": [RETRYABLE.name],
                    },
                }
            ],
        }
    )


def _service_descriptor(stub_cls: type) -> ServiceDescriptor:
    # FooServiceStub lives in ragmesh.<svc>.v1.<file>_pb2_grpc; its package holds the descriptor.
    pb2 = importlib.import_module(stub_cls.__module__.removesuffix("_grpc"))
    descriptor: ServiceDescriptor = pb2.DESCRIPTOR.services_by_name[stub_cls.__name__.removesuffix("Stub")]
    return descriptor


def idempotent_methods(service: ServiceDescriptor) -> frozenset[str]:
    """The methods whose `idempotency_level` (protos/) is IDEMPOTENT or NO_SIDE_EFFECTS: the ones a call may
    retry (AIP-194). Not those that stream their requests: the channel would have to keep every message sent."""
    return frozenset(
        method.name
        for method in service.methods
        if not method.client_streaming and method.GetOptions().idempotency_level != MethodOptions.IDEMPOTENCY_UNKNOWN
    )


class ServiceClient:
    """A long-lived client for one backend service."""

    def __init__(
        self,
        service: str,
        target: str,
        stub_cls: type,
        *,
        timeout: float,
        idempotent_here: Iterable[str] = (),
        max_message_bytes: int = 64 * 1024 * 1024,
        interceptors: Iterable[grpc.aio.ClientInterceptor] = (),
        caller: str | None = None,
    ) -> None:
        """`caller`: the ragmesh service making the calls ("gateway", "search", ...); its telemetry traces
        them and propagates the trace context to the callee. `idempotent_here`: methods the contract does not
        mark idempotent but that are, as this caller uses them (say why where it is passed)."""
        self.service = service
        self.target = target
        self.timeout = timeout
        descriptor = _service_descriptor(stub_cls)
        self.full_name = descriptor.full_name
        self.idempotent = idempotent_methods(descriptor) | frozenset(idempotent_here)
        self.max_message_bytes = max_message_bytes
        self.caller_telemetry = setup_telemetry(caller) if caller else None
        options = [
            ("grpc.service_config", _service_config(self.full_name, self.idempotent)),
            ("grpc.enable_retries", 1),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            # gRPC's default reconnect backoff grows to 120 s: a service restarted after a minute away would be
            # refused for up to two more. Capped, callers find it again within a couple of seconds.
            ("grpc.initial_reconnect_backoff_ms", 250),
            ("grpc.min_reconnect_backoff_ms", 250),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
        ]
        interceptors = [*(self.caller_telemetry.client_interceptors() if self.caller_telemetry else ()), *interceptors]
        token = mesh_token()
        if token:
            interceptors.append(MeshTokenClientInterceptor(token))
        self.channel = grpc.aio.insecure_channel(target, options=options, interceptors=interceptors or None)
        self.stub = stub_cls(self.channel)

    def deadline(self, timeout: float | None = None) -> float:
        """Seconds this call may take: its own timeout, capped by what is left of the call being served."""
        budget = self.timeout if timeout is None else timeout
        inherited = current_deadline.get()
        if inherited is not None:
            budget = min(budget, inherited - time.monotonic())
        if budget < _MIN_TIMEOUT:
            raise RagmeshError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                Reason.DEADLINE_EXCEEDED,
                f"no time left to call {self.service}",
                "ragmesh",
                {"service": self.service},
            )
        return budget

    async def call(self, method: str, request: inprocess.Request, *, timeout: float | None = None) -> Any:
        """A unary or client-streaming call; raises RagmeshError on failure. A service of this process
        (`ragmesh up`) answers it directly (`inprocess`)."""
        local = inprocess.served(self.target)
        if local is not None:
            return await inprocess.unary(local, self, method, request, timeout)
        try:
            return await getattr(self.stub, method)(request, timeout=self.deadline(timeout))
        except grpc.RpcError as exc:
            raise self._error(exc, method) from None

    def _error(self, exc: grpc.RpcError, method: str) -> RagmeshError:
        return self.failed(from_rpc_error(exc, service=self.service, target=self.target), method)

    def failed(self, err: RagmeshError, method: str) -> RagmeshError:
        """`err` as a call of `method` raises it: marked `retried` when the channel's policy retried it (an
        idempotent method, UNAVAILABLE), so the service serving this caller tells its callers not to retry."""
        err.retried = method in self.idempotent and err.code == RETRYABLE
        return err

    async def stream(
        self, method: str, request: inprocess.Request, *, timeout: float | None = None
    ) -> AsyncIterator[Any]:
        """A server-streaming call; yields responses, raises RagmeshError on failure."""
        local = inprocess.served(self.target)
        if local is not None:
            async with contextlib.aclosing(inprocess.stream(local, self, method, request, timeout)) as responses:
                async for response in responses:
                    yield response
            return
        call = getattr(self.stub, method)(request, timeout=self.deadline(timeout))
        try:
            async for response in call:
                yield response
        except grpc.RpcError as exc:
            raise self._error(exc, method) from None
        finally:
            call.cancel()  # the caller stopped early (a client went away): the callee stops too; else a no-op

    async def check_health(self, timeout: float = 2.0) -> bool:
        """True when the backend's grpc.health.v1 reports SERVING for its service."""
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self.channel)
        try:
            # types-grpcio-health-checking declares HealthStub without its methods (set in __init__ at run time)
            reply: health_pb2.HealthCheckResponse = await stub.Check(  # type: ignore[attr-defined]
                health_pb2.HealthCheckRequest(service=self.full_name), timeout=timeout
            )
        except grpc.RpcError:
            return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING

    async def close(self) -> None:
        await self.channel.close()


async def model_dimension(embedder: ServiceClient, wait_seconds: float) -> int:
    """The embedder's dense dimension, retried while it is starting (loading its model)."""
    from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential

    async for attempt in AsyncRetrying(
        stop=stop_after_delay(wait_seconds),
        wait=wait_exponential(multiplier=0.2, max=2),
        retry=retry_if_exception_type(RagmeshError),
        reraise=True,
    ):
        with attempt:
            info: embedder_pb.GetModelInfoResponse = await embedder.call(
                "GetModelInfo", embedder_pb.GetModelInfoRequest(), timeout=5
            )
            return info.dimension
    raise AssertionError("unreachable")
