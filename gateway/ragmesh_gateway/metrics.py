"""The gateway's Prometheus metrics: request latency by route and status code, requests in flight, and
`GET /metrics` (open like /health, so Prometheus scrapes it without an API key)."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from ragmesh_common.telemetry import LATENCY_BUCKETS
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

router = APIRouter(tags=["health"])


class HttpMetrics:
    """REST and MCP requests, labelled by route template (not the raw path: bounded cardinality)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "ragmesh_http_server_request_duration_seconds",
            "Time to answer an HTTP request, by route and status.",
            ["method", "route", "status_code"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.in_flight = Gauge(
            "ragmesh_http_server_in_flight_requests", "HTTP requests being answered now.", ["method"], registry=registry
        )


class RateLimitMetrics:
    """The shared rate limits' store (Redis): requests let through because it could not be reached."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.store_errors = Counter(
            "ragmesh_gateway_rate_limit_store_errors",
            "Requests let through without a rate-limit check because the store (Redis) failed.",
            registry=registry,
        )


class HttpMetricsMiddleware:
    """Pure ASGI middleware measuring every HTTP request (streamed responses until their last byte)."""

    def __init__(self, app: ASGIApp, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        started = time.perf_counter()
        in_flight = self.metrics.in_flight.labels(method)
        in_flight.inc()
        try:
            await self.app(scope, receive, send_status)
        finally:
            in_flight.dec()
            self.metrics.latency.labels(method, route_of(scope), str(status)).observe(time.perf_counter() - started)


def route_of(scope: Scope) -> str:
    """The route template a request matched: FastAPI's routes leave themselves in the scope; a plain Starlette
    route, such as /mcp (an ASGI app), is looked up among the app's routes; "unmatched" when none matches."""
    route = scope.get("route")
    if route is None:
        routes = getattr(scope.get("app"), "routes", ())
        route = next((r for r in routes if isinstance(r, Route) and r.matches(scope)[0] is Match.FULL), None)
    return getattr(route, "path", None) or "unmatched"


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus exposition of the gateway's metrics."""
    registry = request.app.state.telemetry.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
