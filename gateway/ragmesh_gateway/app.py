"""The gateway application: `create_app` builds it, and `run_gateway` serves it under uvicorn in the background
of the current event loop (`ragmesh up` / `ragmesh serve gateway`, which handle SIGTERM, and tests)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import AsyncIterator, Iterable, Iterator
from http import HTTPStatus
from typing import Any

import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from ragmesh_common.config import ConfigError
from ragmesh_common.ports import port_in_use
from ragmesh_common.telemetry import setup_telemetry

from . import metrics
from .auth import RateLimiter, document_bearer_auth, route_scope
from .clients import MeshClients
from .config import GatewaySettings
from .context import REQUEST_ID_HEADER
from .errors import install_error_handlers
from .mcp_server import MCP_HEADERS, build_mcp, mcp_scopes
from .mcp_server import http_endpoint as mcp_http_endpoint
from .metrics import HttpMetrics, HttpMetricsMiddleware, RateLimitMetrics
from .middleware import BodyLimitMiddleware, RequestContextMiddleware
from .routes import api_routers, health, web


def create_app(settings: GatewaySettings, clients: MeshClients | None = None) -> FastAPI:
    """Build the REST app (and the MCP endpoint at /mcp). Without `clients`, the lifespan creates the gRPC
    clients at start-up and closes them at shutdown; given `clients`, the caller owns (and closes) them."""
    telemetry = setup_telemetry("gateway")
    rate_limiter = RateLimiter(
        settings.rate_limit_per_second,
        settings.rate_limit_burst,
        redis_url=settings.redis_url.get_secret_value() if settings.redis_url else "",
        redis_prefix=settings.redis_prefix,
        errors=telemetry.metrics(RateLimitMetrics).store_errors,
    )
    # One MCP server per scope the keys carry: a session sees only the tools its key's scope allows.
    servers = {scope: build_mcp(settings, lambda: app.state.clients, scope=scope) for scope in mcp_scopes(settings)}
    mcp_endpoint = mcp_http_endpoint(servers, settings, rate_limiter)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if clients is None:
                app.state.clients = MeshClients(settings)
                stack.push_async_callback(app.state.clients.close)
            for server in servers.values():
                await stack.enter_async_context(server.session_manager.run())
            yield

    app = FastAPI(
        title="ragmesh",
        summary="Retrieval (RAG) over a gRPC mesh: ingest, convert, search and fetch documents, and answer "
        "questions with cited sources.",
        version="1.0.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.rate_limiter = rate_limiter
    app.state.telemetry = telemetry
    if clients is not None:
        app.state.clients = clients
    install_error_handlers(app)
    routers = api_routers(settings)
    require_declared_scopes(routers)
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    for router in routers:
        app.include_router(router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    # An ASGI app as the endpoint (Starlette serves a non-function endpoint as one; its types name only handlers).
    app.add_route("/mcp", mcp_endpoint, include_in_schema=False)  # type: ignore[arg-type]
    web.mount(app)
    # Added innermost first: CORS wraps the request context, which wraps the body cap.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_upload_bytes)
    app.add_middleware(RequestContextMiddleware)
    app.add_middleware(HttpMetricsMiddleware, metrics=telemetry.metrics(HttpMetrics))
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["*"],
            allow_headers=["Authorization", "Content-Type", REQUEST_ID_HEADER, *MCP_HEADERS],
            expose_headers=[REQUEST_ID_HEADER],
        )
    # Outermost: the server span is current in every handler and error body (trace_id).
    telemetry.instrument_fastapi(app)
    return app


def _openapi(app: FastAPI, settings: GatewaySettings) -> dict[str, Any]:
    """The OpenAPI document, stating exactly what this gateway accepts: bearer auth only when keys are set."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                # A body a route describes itself (openapi_extra) replaces the one FastAPI derived from its form
                # parameters, instead of being merged beside its $ref.
                for media in operation.get("requestBody", {}).get("content", {}).values():
                    if "$ref" in media.get("schema", {}) and "properties" in media["schema"]:
                        del media["schema"]["$ref"]
        if settings.api_keys:
            document_bearer_auth(schema, api_routers(settings))
        else:
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    if isinstance(operation, dict):
                        responses = operation.get("responses", {})
                        responses.pop("401", None)
                        if responses.get("403", {}).get("description") == HTTPStatus.FORBIDDEN.phrase:
                            responses.pop("403")  # only about keys (NOT_ALLOWED_RESPONSES stay)
        app.openapi_schema = schema
    return app.openapi_schema


def require_declared_scopes(routers: Iterable[APIRouter]) -> None:
    """Refuse to build an app in which an API route declares no scope (`require_scope`, on the route or its
    router): a route that forgot would be open to every key."""
    for router in routers:
        if any(getattr(d.dependency, "ragmesh_scope", None) for d in router.dependencies):
            continue
        for route in router.routes:
            if isinstance(route, APIRoute) and route_scope(route.dependant) is None:
                raise RuntimeError(
                    f"{sorted(route.methods or ())} {route.path} declares no scope: add "
                    "dependencies=[require_scope('read'|'write'|'admin')]"
                )


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host (`ragmesh up` / `ragmesh serve`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def run_gateway(settings: GatewaySettings, clients: MeshClients | None = None) -> AsyncIterator[str]:
    """Serve the gateway in the background of the running event loop and yield its base URL
    ("http://host:port"; RAGMESH_HTTP_PORT=0 picks a free port). On exit, in-flight requests drain for up to
    RAGMESH_SHUTDOWN_GRACE_SECONDS and the lifespan closes the clients."""
    family = socket.AF_INET6 if ":" in settings.http_host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on connections whose socket says it is TCP, and a
    # socket made with proto 0 does not, so every response would wait ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.http_host, settings.http_port))
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise ConfigError(
                f"the gateway cannot listen on {settings.http_host}:{settings.http_port}: "
                f"{exc.strerror}; check RAGMESH_HTTP_HOST and RAGMESH_HTTP_PORT"
            ) from None
        raise port_in_use("the gateway", settings.http_host, settings.http_port, "RAGMESH_HTTP_PORT") from None
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(settings, clients),
        log_config=None,
        lifespan="on",
        access_log=False,
        # uvicorn passes it to asyncio.wait_for, which takes seconds as a float; its annotation says int.
        timeout_graceful_shutdown=settings.shutdown_grace_seconds,  # type: ignore[arg-type]
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():  # start-up failed (the lifespan raised): surface why
                await task
                raise RuntimeError("the gateway stopped during start-up")
            await asyncio.sleep(0.01)
        host = f"[{settings.http_host}]" if family == socket.AF_INET6 else settings.http_host
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
