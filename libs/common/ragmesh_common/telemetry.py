"""Tracing and metrics, one set-up for every process.

Tracing is the OpenTelemetry SDK with the official instrumentations (gRPC aio server and client, FastAPI,
httpx), configured only by the standard variables:

  OTEL_EXPORTER_OTLP_ENDPOINT   where spans go (any OTLP receiver); unset: no provider, no interceptors,
                                no per-span cost (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT works too)
  OTEL_EXPORTER_OTLP_PROTOCOL   grpc (default) or http/protobuf
  OTEL_TRACES_SAMPLER(_ARG)     e.g. parentbased_traceidratio with 0.1
  OTEL_RESOURCE_ATTRIBUTES      extra resource attributes (deployment.environment=prod, ...)
  OTEL_SERVICE_NAME             the service name when a process serves exactly one service
  OTEL_SDK_DISABLED=true        tracing off whatever else is set

Every service of a process gets its own TracerProvider (resource `service.name=ragmesh-<service>`), passed
explicitly to that service's instrumentations, so `ragmesh up` (all services in one process) still shows
ragmesh-gateway, ragmesh-search, ragmesh-embedder, ... as distinct services of one trace.

Metrics are prometheus-client, one registry per service (`Telemetry.registry`), served by the gateway on
/metrics and by each gRPC service on its metrics port (`serve_metrics`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Tracer, TracerProvider
from prometheus_client import CollectorRegistry, Gauge, Histogram, ProcessCollector

from .handlers import Behavior, Handler, rewrap_handler

if TYPE_CHECKING:
    import httpx
    from fastapi import FastAPI
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)
M = TypeVar("M")
S = TypeVar("S")

# gRPC services never traced and not measured: probes and tooling, not user requests.
UNTRACED_GRPC_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.")
# Gateway paths never traced (comma-separated regexes, as FastAPIInstrumentor takes them).
UNTRACED_HTTP_PATHS = "/health$,/ready$,/metrics$"
# Latency buckets (seconds) for request histograms: a 2 ms search to a minutes-long file ingest.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Attr:
    """The custom span attributes, all under `ragmesh.`."""

    COLLECTION = "ragmesh.collection"
    DOC_ID = "ragmesh.doc_id"
    CHUNK_COUNT = "ragmesh.chunk_count"
    BATCH_SIZE = "ragmesh.batch_size"
    MODEL = "ragmesh.model"
    # The name a request picked a model by, where one service serves several (the embedder).
    MODEL_NAME = "ragmesh.model_name"
    TOP_K = "ragmesh.top_k"
    MODE = "ragmesh.mode"
    RESULT_COUNT = "ragmesh.result_count"
    STATUS = "ragmesh.status"
    STORE_OPERATION = "ragmesh.store.operation"
    GENERATOR = "ragmesh.generator"
    QUERY_COUNT = "ragmesh.query_count"
    NDCG_AT_10 = "ragmesh.ndcg_at_10"


def tracing_configured() -> bool:
    """True when spans have somewhere to go (an OTLP endpoint is set and the SDK is not disabled)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def _tracer_provider(service_name: str, use_env_service_name: bool) -> TracerProvider:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME; what is passed here wins.
    attributes = {} if use_env_service_name and os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: service_name}
    provider = SdkTracerProvider(resource=Resource.create(attributes))  # sampler from OTEL_TRACES_SAMPLER
    provider.add_span_processor(BatchSpanProcessor(_span_exporter()))
    return provider


def _span_exporter() -> SpanExporter:
    """The OTLP exporter named by OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL; it reads its endpoint itself."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).strip()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter

        return HttpSpanExporter()
    from .config import ConfigError

    raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported; use grpc or http/protobuf")


def _untraced(method: str) -> bool:
    return method.lstrip("/").startswith(UNTRACED_GRPC_SERVICES)


def _grpc_filter() -> Callable[[Any], bool]:
    """A condition on a call's details, a server's or a client's: true for the calls to trace."""
    from opentelemetry.instrumentation.grpc import filters

    return filters.negate(filters.any_of(*(filters.service_prefix(s) for s in UNTRACED_GRPC_SERVICES)))


class Telemetry:
    """One service's tracer provider and metrics registry. Get it with `setup_telemetry(service)`."""

    def __init__(self, service: str, *, use_env_service_name: bool = False) -> None:
        self.service = service
        self.service_name = f"ragmesh-{service}"
        self.tracing = tracing_configured()
        self.tracer_provider: TracerProvider = (
            _tracer_provider(self.service_name, use_env_service_name) if self.tracing else trace.NoOpTracerProvider()
        )
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._metric_sets: dict[Callable[[CollectorRegistry], object], object] = {}

    def tracer(self, name: str = "ragmesh") -> Tracer:
        return self.tracer_provider.get_tracer(name)

    def metrics(self, metric_set: Callable[[CollectorRegistry], M]) -> M:
        """This service's instance of a set of metrics (a class taking the registry), created once, so a
        server built again in the same process (tests) shares them instead of registering them twice."""
        with _lock:
            if metric_set not in self._metric_sets:
                self._metric_sets[metric_set] = metric_set(self.registry)
            return self._metric_sets[metric_set]  # type: ignore[return-value]

    def server_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """Outermost first: the OpenTelemetry server span (when tracing), then the request metrics."""
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if self.tracing:
            from opentelemetry.instrumentation.grpc import aio_server_interceptor

            interceptors.append(aio_server_interceptor(tracer_provider=self.tracer_provider, filter_=_grpc_filter()))
        interceptors.append(MetricsInterceptor(self.metrics(GrpcServerMetrics)))
        return interceptors

    def client_interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """Client spans that carry the trace context to the callee (none when tracing is off)."""
        if not self.tracing:
            return []
        from opentelemetry.instrumentation.grpc import aio_client_interceptors

        return list(aio_client_interceptors(tracer_provider=self.tracer_provider, filter_=_grpc_filter()))

    def instrument_httpx(self, client: httpx.AsyncClient | httpx.Client) -> None:
        """Trace (and propagate the context of) the requests of one httpx client."""
        if self.tracing:
            from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

            HTTPXClientInstrumentor.instrument_client(client, tracer_provider=self.tracer_provider)

    def instrument_fastapi(self, app: FastAPI) -> None:
        """Server spans for every request except the probes and /metrics."""
        if self.tracing:
            from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

            FastAPIInstrumentor.instrument_app(
                app,
                tracer_provider=self.tracer_provider,
                excluded_urls=UNTRACED_HTTP_PATHS,
                exclude_spans=["receive", "send"],
            )

    def traced_store(self, store: S) -> S | TracedStore:
        """The store with every call in a span of its own (see TracedStore)."""
        return TracedStore(store, self.tracer("ragmesh.store")) if self.tracing else store


_lock = threading.RLock()
_services: dict[str, Telemetry] = {}


def setup_telemetry(service: str, *, use_env_service_name: bool = False) -> Telemetry:
    """The telemetry of `service` ("gateway", "search", ...) in this process, created on first use from the
    environment. `use_env_service_name`: the process serves only this service, so OTEL_SERVICE_NAME (when
    set) names it; otherwise it is always `ragmesh-<service>`."""
    with _lock:
        if service not in _services:
            _services[service] = Telemetry(service, use_env_service_name=use_env_service_name)
        return _services[service]


def annotate(attributes: Mapping[str, Any]) -> None:
    """Set `ragmesh.` attributes on the current span (a no-op when it is not recording)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


# --- the store -----------------------------------------------------------------------------------------------
class TracedStore:
    """Wraps a store (ragmesh_store.Store): each method call is a CLIENT span `store.<method>` with the
    collection, so a trace shows the time spent in Qdrant. Attributes pass through unchanged."""

    def __init__(self, store: object, tracer: Tracer) -> None:
        self._store = store
        self._tracer = tracer

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value) or name.startswith("_") or name == "close":
            return value

        @functools.wraps(value)
        def traced(*args: Any, **kwargs: Any) -> Any:
            attributes: dict[str, Any] = {"db.system.name": "qdrant", Attr.STORE_OPERATION: name}
            if args and isinstance(args[0], str):
                attributes[Attr.COLLECTION] = args[0]
            if name == "upsert" and len(args) > 1:
                attributes[Attr.BATCH_SIZE] = len(args[1])
            with self._tracer.start_as_current_span(f"store.{name}", kind=SpanKind.CLIENT, attributes=attributes):
                return value(*args, **kwargs)

        return traced


# --- metrics ----------------------------------------------------------------------------------------------
class GrpcServerMetrics:
    """Request latency by RPC and status code, and requests in flight, for one gRPC service."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "ragmesh_grpc_server_handling_seconds",
            "Time to serve a gRPC call, by RPC and status code.",
            ["grpc_service", "grpc_method", "grpc_code"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.in_flight = Gauge(
            "ragmesh_grpc_server_in_flight_requests",
            "gRPC calls being served now.",
            ["grpc_service", "grpc_method"],
            registry=registry,
        )


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Measures every call except health checks and reflection."""

    def __init__(self, metrics: GrpcServerMetrics) -> None:
        self.metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None or _untraced(handler_call_details.method):
            return handler
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        return rewrap_handler(handler, self._unary(service, method), self._stream(service, method))

    def _unary(self, service: str, method: str) -> Callable[[Behavior], Behavior]:
        def wrap(behavior: Behavior) -> Behavior:
            async def measured(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                with self._measure(service, method, context):
                    return await behavior(request, context)

            return measured

        return wrap

    def _stream(self, service: str, method: str) -> Callable[[Behavior], Behavior]:
        def wrap(behavior: Behavior) -> Behavior:
            async def measured(request: object, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
                with self._measure(service, method, context):
                    async for response in behavior(request, context):
                        yield response

            return measured

        return wrap

    def _measure(self, service: str, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> _Measured:
        return _Measured(self.metrics, service, method, context)


class _Measured:
    """Context manager: in-flight +1/-1 and one latency observation labelled with the final status code."""

    def __init__(
        self, metrics: GrpcServerMetrics, service: str, method: str, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.metrics, self.service, self.method, self.context = metrics, service, method, context

    def __enter__(self) -> None:
        self.metrics.in_flight.labels(self.service, self.method).inc()
        self.started = time.perf_counter()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        elapsed = time.perf_counter() - self.started
        self.metrics.in_flight.labels(self.service, self.method).dec()
        code = _status_code(self.context, exc)
        self.metrics.latency.labels(self.service, self.method, code).observe(elapsed)


def _status_code(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None) -> str:
    """The call's status code name: what the handler set or aborted with, CANCELLED, or UNKNOWN."""
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 - older grpc: no code() on aio contexts
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int):
        return next((c.name for c in grpc.StatusCode if c.value[0] == code), "UNKNOWN")
    if exc is None:
        return "OK"
    return "CANCELLED" if isinstance(exc, asyncio.CancelledError) else "UNKNOWN"


def serve_metrics(telemetry: Telemetry, host: str, port: int) -> Callable[[], None] | None:
    """Serve `telemetry.registry` on http://host:port/metrics in a background thread; returns the function
    that stops it. Port 0 disables the endpoint (returns None). A port already in use is logged, not fatal:
    the service itself keeps serving."""
    if port == 0:
        return None
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=telemetry.registry)
    except OSError as exc:
        log.error(
            "%s: cannot serve metrics on %s:%d: %s; set RAGMESH_%s_METRICS_PORT to a free port (0: off)",
            telemetry.service,
            host,
            port,
            exc.strerror or exc,
            telemetry.service.upper(),
        )
        return None
    log.info("%s metrics on http://%s:%d/metrics", telemetry.service, host, port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5)

    return stop
