"""Calls between services of one process (`ragmesh up`) served in that process, without the network.

`ragmesh up` runs every service in one process; each is still a real gRPC server on its port, for callers
outside the process. A `ServiceClient` whose target is a service of its own process calls that service's
servicer directly instead: no serialising, no HTTP/2 over loopback, no hand-offs to gRPC's poller thread.
With the embedder one call away from search and the gateway, that was most of what a REST search cost over
the work itself (`bench/report.py`: ~0.6 ms and ~0.6 CPU ms per hop here).

What a caller sees is what it sees over gRPC:
  - the answer, or the error the callee's error interceptor would send, decoded as `from_rpc_error` decodes it
    (reason, domain, field violations, retry-after; an unexpected exception is INTERNAL);
  - deadlines: the call gets the caller's timeout capped by its own deadline, the callee sees it as its
    `current_deadline`, and a call still running when it passes is cancelled: DEADLINE_EXCEEDED;
  - retries: an idempotent unary call answered UNAVAILABLE is tried again as the channel's retry policy does
    (up to 4 attempts, jittered backoff from 0.1 s), unless the callee already retried (server pushback);
  - the client's message size limit, on each message of a request stream too (where gRPC's core reports a
    streamed message over it as INTERNAL, this names it: RESOURCE_EXHAUSTED);
  - cancellation both ways; the callee's own context (contextvars set while serving do not leak back to the
    caller);
  - the callee's `ragmesh_grpc_server_*` metrics, and with tracing on a CLIENT span of the caller and a SERVER
    span of the callee named and attributed as the gRPC instrumentation names them: one trace as before.
Not the same: no mesh token is checked (the caller is this process); the callee's server-side message size
limit is not applied (the client's is); and the callee gets the caller's message itself, not a copy, as the
caller gets the callee's answer (no service changes a message it has sent or received).
RAGMESH_IN_PROCESS_CALLS=false sends every call over gRPC.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import random
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

import grpc
from google.protobuf.message import Message
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .deadlines import current_deadline
from .errors import RagmeshError, from_rpc_error, received, transport_error
from .handlers import Behavior, Handler
from .reasons import Reason
from .status import status_error
from .telemetry import GrpcServerMetrics, Telemetry

# The retry policy of `clients._service_config`, as gRPC applies it (gRFC A6): attempts, first and longest backoff.
_ATTEMPTS, _BACKOFF, _BACKOFF_MAX, _MULTIPLIER = 4, 0.1, 2.0, 2.0
_END = object()
# A call's request: one message, or (for a streaming request) the messages, sync or async.
Request = Message | AsyncIterable[Message] | Iterable[Message]


class InProcessSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True)

    calls: bool = Field(
        True,
        validation_alias="RAGMESH_IN_PROCESS_CALLS",
        description=(
            "`ragmesh up`: a service calls another service of its process directly instead of over loopback gRPC "
            "(false: every call over gRPC)."
        ),
    )


class Caller(Protocol):
    """What a call served here needs of its client: `clients.ServiceClient`, which calls this module."""

    service: str
    target: str
    full_name: str
    idempotent: frozenset[str]
    max_message_bytes: int
    caller_telemetry: Telemetry | None

    def deadline(self, timeout: float | None = None) -> float: ...

    def failed(self, err: RagmeshError, method: str) -> RagmeshError: ...


@dataclass(frozen=True)
class LocalService:
    """A started gRPC service of this process: its method handlers by path ("/pkg.Service/Method")."""

    name: str
    domain: str
    handlers: Mapping[str, Handler]
    telemetry: Telemetry

    @functools.cached_property
    def metrics(self) -> GrpcServerMetrics:
        """The service's request metrics, looked up once (its server's interceptor holds the same)."""
        return self.telemetry.metrics(GrpcServerMetrics)


_served: dict[str, LocalService] = {}


def serve(target: str, service: LocalService) -> None:
    """Clients of this process whose target is `target` ("127.0.0.1:50052") call `service` directly."""
    _served[target] = service


def withdraw(target: str) -> None:
    """Calls to `target` go over gRPC again (its service is stopping: gRPC's own drain and refusals apply)."""
    _served.pop(target, None)


def served(target: str) -> LocalService | None:
    return _served.get(target)


# --- the caller's side --------------------------------------------------------------------------------------
async def unary(local: LocalService, client: Caller, method: str, request: Request, timeout: float | None) -> Any:
    """`client.call(method, request)` served by `local`; raises RagmeshError as the gRPC path does."""
    path = f"/{client.full_name}/{method}"
    handler = _handler(local, client, path)
    behavior = handler.unary_unary or handler.stream_unary
    if behavior is None:
        raise _misuse(client, path, "a streaming response; use stream()")
    streaming_request = handler.stream_unary is not None
    request = _sent(request, streaming_request, client)
    loop = asyncio.get_running_loop()
    budget = client.deadline(timeout)
    deadline, expires = loop.time() + budget, time.monotonic() + budget
    backoff = _BACKOFF
    with _client_span(client, path) as parent:
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                task = loop.create_task(
                    _serve_unary(local, path, behavior, request, expires, parent), context=contextvars.copy_context()
                )
                return await _until(task, deadline, client)
            except RagmeshError as err:
                # `retried` here: the callee pushed back (it retried downstream already).
                retry = (
                    not streaming_request
                    and attempt < _ATTEMPTS
                    and method in client.idempotent
                    and err.code == grpc.StatusCode.UNAVAILABLE
                    and not err.retried
                )
                if not retry or (pause := random.uniform(0, backoff)) >= deadline - loop.time():
                    raise client.failed(err, method) from None
                await asyncio.sleep(pause)
                backoff = min(backoff * _MULTIPLIER, _BACKOFF_MAX)
    raise AssertionError("unreachable")


async def stream(
    local: LocalService, client: Caller, method: str, request: Request, timeout: float | None
) -> AsyncGenerator[Any, None]:
    """`client.stream(method, request)` served by `local`: each response as the callee yields it (none read
    ahead); closing early cancels the callee, as a cancelled gRPC call does."""
    path = f"/{client.full_name}/{method}"
    handler = _handler(local, client, path)
    behavior = handler.unary_stream or handler.stream_stream
    if behavior is None:
        raise _misuse(client, path, "a unary response; use call()")
    request = _sent(request, handler.stream_stream is not None, client)
    loop = asyncio.get_running_loop()
    budget = client.deadline(timeout)
    deadline, expires = loop.time() + budget, time.monotonic() + budget
    context = contextvars.copy_context()  # the callee's: every step of its generator runs in it
    with _client_span(client, path) as parent:
        responses = _serve_stream(local, path, behavior, request, expires, parent)
        try:
            while (
                response := await _until(loop.create_task(_step(responses), context=context), deadline, client)
            ) is not _END:
                yield response
        except RagmeshError as err:
            raise client.failed(err, method) from None
        finally:
            await loop.create_task(_close(responses), context=context)


async def _until(task: asyncio.Task[Any], deadline: float, client: Caller) -> Any:
    """The task's result; past the deadline (on the loop's clock) the task is cancelled and the call fails as
    gRPC's would."""
    try:
        async with asyncio.timeout_at(deadline):
            return await task
    except TimeoutError:
        raise transport_error(
            grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", service=client.service, target=client.target
        ) from None


async def _step(responses: AsyncIterator[Any]) -> Any:
    return await anext(responses, _END)


async def _close(responses: AsyncGenerator[Any, None]) -> None:
    await responses.aclose()


def _handler(local: LocalService, client: Caller, path: str) -> Handler:
    handler = local.handlers.get(path)
    if handler is None:  # as gRPC answers a method the server does not serve
        raise transport_error(
            grpc.StatusCode.UNIMPLEMENTED, "Method not found!", service=client.service, target=client.target
        )
    return handler


def _misuse(client: Caller, path: str, what: str) -> RagmeshError:
    return RagmeshError(
        grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"{path} has {what}", "ragmesh", {"service": client.service}
    )


def _check_size(client: Caller, request: Message) -> None:
    size = request.ByteSize()
    if size > client.max_message_bytes:  # the message gRPC's channel gives for the same request
        raise transport_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Sent message larger than max ({size} vs. {client.max_message_bytes})",
            service=client.service,
            target=client.target,
        )


def _sent(request: Any, streaming: bool, client: Caller) -> Any:
    """The request as the servicer gets it: a message checked against the client's size limit now, or a stream
    whose messages are checked as they are read."""
    if streaming:
        return _async_iter(request, client)
    _check_size(client, request)
    return request


async def _async_iter(
    requests: AsyncIterable[Message] | Iterable[Message], client: Caller
) -> AsyncGenerator[Message, None]:
    """A request stream as the servicer reads it: an async iterator, whatever the caller passed, each message
    within the client's size limit (a larger one fails the call, as gRPC's channel fails it)."""
    if hasattr(requests, "__aiter__"):
        async for request in requests:
            _check_size(client, request)
            yield request
    else:
        for request in requests:
            _check_size(client, request)
            yield request


class _client_span:  # noqa: N801 - a context manager used like a function
    """The caller's CLIENT span of the call (tracing on and the client names its caller), or none."""

    def __init__(self, client: Caller, path: str) -> None:
        self.telemetry = client.caller_telemetry
        self.path = path
        self.span: trace.Span | None = None

    def __enter__(self) -> trace.Span | None:
        if self.telemetry is not None and self.telemetry.tracing:
            self.span = self.telemetry.tracer("opentelemetry.instrumentation.grpc").start_span(
                self.path, kind=SpanKind.CLIENT, attributes=_rpc_attributes(self.path)
            )
        return self.span

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.span is None:
            return
        code = (
            exc.code
            if isinstance(exc, RagmeshError)
            else (
                grpc.StatusCode.CANCELLED
                if isinstance(exc, asyncio.CancelledError)
                else grpc.StatusCode.UNKNOWN
                if exc is not None
                else grpc.StatusCode.OK
            )
        )
        _end(self.span, code, exc)


# --- the callee's side: what its server interceptors do for a call over gRPC -----------------------------
async def _serve_unary(
    local: LocalService, path: str, behavior: Behavior, request: Request, expires: float, parent: trace.Span | None
) -> Any:
    with _Served(local, path, expires, parent) as served_call:
        try:
            return await behavior(request, None)
        except Exception as exc:  # noqa: BLE001 - mapped as the error interceptor maps it
            raise served_call.failed(exc) from None


async def _serve_stream(
    local: LocalService, path: str, behavior: Behavior, request: Request, expires: float, parent: trace.Span | None
) -> AsyncGenerator[Any, None]:
    with _Served(local, path, expires, parent) as served_call:
        try:
            async for response in behavior(request, None):
                yield response
        except Exception as exc:  # noqa: BLE001
            raise served_call.failed(exc) from None


class _Served:
    """One call as the callee's server sees it: its deadline, in-flight gauge and latency by status code, and
    its SERVER span (child of the caller's CLIENT span) while tracing. Its clocks are `time`'s, not the event
    loop's: uvloop's `loop.time()` counts whole milliseconds, as of the start of the loop's iteration, so a call
    served within one would last 0 s."""

    def __init__(self, local: LocalService, path: str, expires: float, parent: trace.Span | None) -> None:
        self.local, self.path, self.parent = local, path, parent
        self.service, _, self.method = path.lstrip("/").rpartition("/")
        self.metrics = local.metrics
        self.code = grpc.StatusCode.OK
        current_deadline.set(expires)  # time.monotonic(), as the error interceptor records it

    def __enter__(self) -> _Served:
        self.span = None
        if self.local.telemetry.tracing:
            self.span = self.local.telemetry.tracer("opentelemetry.instrumentation.grpc").start_span(
                self.path,
                kind=SpanKind.SERVER,
                attributes=_rpc_attributes(self.path),
                context=trace.set_span_in_context(self.parent) if self.parent is not None else None,
            )
            self._attached = trace.use_span(self.span, end_on_exit=False)
            self._attached.__enter__()
        self.metrics.in_flight.labels(self.service, self.method).inc()
        self.started = time.perf_counter()
        return self

    def failed(self, exc: Exception) -> RagmeshError:
        """What the caller receives for `exc`: the status the server would send, decoded."""
        if isinstance(exc, grpc.RpcError):  # a raw downstream failure: gRPC would send its status on
            sent = from_rpc_error(exc)
        else:
            sent = status_error(exc, self.local.domain, self.path)
        self.code = sent.code
        return received(sent)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, asyncio.CancelledError):
            self.code = grpc.StatusCode.CANCELLED
        elapsed = time.perf_counter() - self.started
        self.metrics.in_flight.labels(self.service, self.method).dec()
        self.metrics.latency.labels(self.service, self.method, self.code.name).observe(elapsed)
        if self.span is not None:
            self._attached.__exit__(None, None, None)
            _end(self.span, self.code, exc, server=True)


def _rpc_attributes(path: str) -> dict[str, Any]:
    service, _, method = path.lstrip("/").rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


# The codes that make a SERVER span an error (the server's fault), as OpenTelemetry's semantic conventions for
# gRPC and its gRPC instrumentation have it; every code but OK makes a CLIENT span one.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _end(span: trace.Span, code: grpc.StatusCode, exc: BaseException | None, *, server: bool = False) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code in _SERVER_ERRORS if server else code != grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, f"{code.name}: {exc}" if exc else code.name))
    span.end()
