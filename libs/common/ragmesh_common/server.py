"""gRPC aio server plumbing every service uses: the error interceptor, health, reflection, deadlines,
graceful shutdown, and the heap settled once a process serves (`freeze_startup_heap`).

A service's `create_server(settings)` calls `new_server(...)`, registers its servicer and returns
`(server, port)`; `ragmesh_cli.mesh.run` (`ragmesh up` / `ragmesh serve`) runs it until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import deadlines, inprocess
from .config import ServiceSettings
from .handlers import Behavior, Handler, rewrap_handler
from .meshauth import MeshTokenServerInterceptor, mesh_token
from .ports import port_free, port_in_use
from .status import status_error
from .telemetry import setup_telemetry


class ErrorInterceptor(grpc.aio.ServerInterceptor):
    """Maps domain errors to rich status once for all servicers (`status.status_error`), and records the call's
    deadline (`deadlines.current_deadline`)."""

    def __init__(self, domain: str) -> None:
        self.domain = domain

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        return rewrap_handler(handler, lambda b: self._wrap_unary(b, method), lambda b: self._wrap_stream(b, method))

    def _wrap_unary(self, behavior: Behavior, method: str) -> Behavior:
        async def wrapper(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            deadlines.record(context)
            try:
                return await behavior(request, context)
            except Exception as exc:  # noqa: BLE001 - mapped below, never leaks as UNKNOWN
                await self._abort(context, exc, method)

        return wrapper

    def _wrap_stream(self, behavior: Behavior, method: str) -> Behavior:
        if inspect.iscoroutinefunction(behavior):
            # A streaming handler that sends with `context.write()` (grpc_health's aio Watch, which gRPC's
            # client-side health checking calls) is awaited, not iterated.
            return self._wrap_unary(behavior, method)

        async def wrapper(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            deadlines.record(context)
            try:
                async for response in behavior(request, context):
                    yield response
            except Exception as exc:  # noqa: BLE001
                await self._abort(context, exc, method)

        return wrapper

    async def _abort(self, context: grpc.aio.ServicerContext[Any, Any], exc: Exception, method: str) -> NoReturn:
        if isinstance(exc, asyncio.CancelledError) or _is_abort(exc):
            raise exc
        err = status_error(exc, self.domain, method)
        await context.abort(err.code, err.message, err.trailing_metadata())


def _is_abort(exc: Exception) -> bool:
    # context.abort() raises a private exception type; let it through untouched.
    return type(exc).__name__ == "AbortError" or isinstance(exc, grpc.RpcError)


@dataclass
class Service:
    """A running gRPC server with its health servicer, so shutdown can report NOT_SERVING first."""

    name: str
    server: grpc.aio.Server
    port: int
    health: health.aio.HealthServicer
    service_names: tuple[str, ...]
    grace: float
    # Called after the server stopped (close channels, models, the store); sync or async.
    closers: list[Callable[[], object]] = field(default_factory=list)
    domain: str = ""
    # The servicers' method handlers by path ("/pkg.Service/Method"), for calls served in process.
    handlers: dict[str, Handler] = field(default_factory=dict)
    # The targets clients of this process reach it at directly (`serve_in_process`).
    in_process_targets: list[str] = field(default_factory=list)

    def serve_in_process(self, target: str) -> None:
        """Clients of this process whose target is `target` call this service directly (`inprocess`)."""
        inprocess.serve(
            target, inprocess.LocalService(self.name, self.domain, self.handlers, setup_telemetry(self.name))
        )
        self.in_process_targets.append(target)

    async def start(self) -> None:
        await self.server.start()
        for name in (*self.service_names, ""):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, then let in-flight calls drain for up to `grace` seconds. Calls from this process
        go over gRPC from now on, so they get gRPC's drain and refusals too."""
        for target in self.in_process_targets:
            inprocess.withdraw(target)
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.grace if grace is None else grace)
        for close in self.closers:
            result = close()
            if asyncio.iscoroutine(result):
                await result


def new_server(
    name: str,
    settings: ServiceSettings,
    register: Callable[[grpc.aio.Server], None],
    service_names: Iterable[str],
    *,
    domain: str,
) -> Service:
    """Build (not start) a gRPC aio server with the error interceptor, health and reflection, bound on
    settings.host:settings.port (0 = a free port)."""
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 0),
        # Clients reconnect (and re-resolve DNS) periodically, so new pods of a scaled service get traffic.
        # The grace lets a long call on an aged connection (ingesting a large file) finish.
        ("grpc.max_connection_age_ms", 60_000),
        ("grpc.max_connection_age_grace_ms", 3_600_000),
    ]
    # Outermost first: tracing and metrics see the status the error interceptor maps a failure to.
    interceptors = [*setup_telemetry(name).server_interceptors(), ErrorInterceptor(domain)]
    token = mesh_token()
    if token:
        interceptors.insert(0, MeshTokenServerInterceptor(token, domain))  # refused before anything runs
    server = grpc.aio.server(interceptors=interceptors, options=options)
    recording = _RecordingServer(server)
    register(recording)  # type: ignore[arg-type]
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = tuple(service_names)
    reflection.enable_server_reflection((*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    prefix = settings.model_config.get("env_prefix", "RAGMESH_")
    # Checked first so that a taken port is one clear line, not also gRPC's own error log.
    if settings.port and not port_free(settings.host, settings.port):
        raise port_in_use(f"the {name} service", settings.host, settings.port, f"{prefix}PORT")
    try:
        port = server.add_insecure_port(f"{_bind_host(settings.host)}:{settings.port}")
    except RuntimeError:  # grpc's "Failed to bind to address"
        port = 0
    if port == 0:
        raise port_in_use(f"the {name} service", settings.host, settings.port, f"{prefix}PORT")
    return Service(
        name,
        server,
        port,
        health_servicer,
        names,
        settings.shutdown_grace_seconds,
        domain=domain,
        handlers=recording.handlers,
    )


class _RecordingServer:
    """The server as `register` sees it: the generated `add_*Servicer_to_server` functions hand it their
    method handlers, which are kept for calls served in process."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server
        self.handlers: dict[str, Handler] = {}

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Handler]) -> None:
        self.handlers.update({f"/{service}/{method}": handler for method, handler in handlers.items()})
        self._server.add_registered_method_handlers(service, handlers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)


def _bind_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def freeze_startup_heap() -> int:
    """Once a process serves: collect start-up's garbage, then take every object still alive out of the garbage
    collector's scans (`gc.freeze`); returns how many. Those objects (modules, the model, the app, servicers and
    clients: ~280,000 in `ragmesh up`) live as long as the process, yet each full collection walked them all: 80-120
    ms with the GIL held, a pause for every request in flight (at 32 concurrent searches, p99 at 3-4 x p50). Objects
    made later are collected as before. As pre-fork servers do for their workers (the `gc.freeze` docs)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
