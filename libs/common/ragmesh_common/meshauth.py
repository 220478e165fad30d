"""An optional shared secret between the services, for clusters without a service mesh (mTLS by Istio/Linkerd is
the stronger choice where there is one): with RAGMESH_MESH_TOKEN set on every process, each client sends it as
`x-ragmesh-mesh-token` metadata on every call and each server refuses calls without it (UNAUTHENTICATED
MESH_TOKEN_INVALID), compared in constant time. Health checks and reflection stay open, so Kubernetes' gRPC probes
and grpcurl still work. Unset (the default): no check."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, NoReturn

import grpc
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import RagmeshError
from .handlers import Handler, rewrap_handler
from .reasons import Reason

METADATA_KEY = "x-ragmesh-mesh-token"
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
# A request stream as a client interceptor gets it.
Requests = AsyncIterable[Any] | Iterable[Any]


class MeshAuthSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    mesh_token: SecretStr | None = Field(
        None,
        min_length=16,
        validation_alias="RAGMESH_MESH_TOKEN",
        description="Shared secret every service sends and requires on gRPC calls (at least 16 characters).",
    )


def mesh_token() -> str | None:
    """This process's RAGMESH_MESH_TOKEN, if set."""
    from .config import load

    token = load(MeshAuthSettings).mesh_token
    return token.get_secret_value() if token else None


class MeshTokenServerInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls that do not carry the mesh token (health and reflection excepted)."""

    def __init__(self, token: str, domain: str) -> None:
        self._token = token.encode()
        self._domain = domain

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method = handler_call_details.method
        if method.startswith(OPEN_SERVICES):
            return await continuation(handler_call_details)
        presented = dict(handler_call_details.invocation_metadata or ()).get(METADATA_KEY, "")
        if hmac.compare_digest(str(presented).encode(), self._token):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        error = RagmeshError(
            grpc.StatusCode.UNAUTHENTICATED,
            Reason.MESH_TOKEN_INVALID,
            f"{method}: this service needs the mesh token (RAGMESH_MESH_TOKEN)",
            self._domain,
        )

        async def refuse(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> NoReturn:
            await context.abort(error.code, error.message, error.trailing_metadata())

        async def refuse_stream(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[None]:
            await context.abort(error.code, error.message, error.trailing_metadata())
            yield  # pragma: no cover - abort raises

        return rewrap_handler(handler, lambda _: refuse, lambda _: refuse_stream)


class MeshTokenClientInterceptor(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamUnaryClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    """Adds the mesh token to every call's metadata."""

    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(METADATA_KEY, self._token)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[grpc.aio.UnaryUnaryCall[Any, Any]]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> grpc.aio.UnaryUnaryCall[Any, Any]:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[grpc.aio.UnaryStreamCall[Any, Any]]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> grpc.aio.UnaryStreamCall[Any, Any]:
        return await continuation(self._details(client_call_details), request)

    async def intercept_stream_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Requests], Awaitable[grpc.aio.StreamUnaryCall[Any, Any]]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Requests,
    ) -> grpc.aio.StreamUnaryCall[Any, Any]:
        return await continuation(self._details(client_call_details), request_iterator)

    async def intercept_stream_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Requests], Awaitable[grpc.aio.StreamStreamCall[Any, Any]]],
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Requests,
    ) -> grpc.aio.StreamStreamCall[Any, Any]:
        return await continuation(self._details(client_call_details), request_iterator)
