"""What server interceptors build on: a method handler with its behaviour wrapped (`server.ErrorInterceptor`,
`telemetry.MetricsInterceptor`, `meshauth.MeshTokenServerInterceptor`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, cast

import grpc

# A server method handler of any service: requests and responses are the messages of whichever method it serves.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"  # a string: grpc's class is generic only in its stubs
# A handler's behaviour (async on aio servers: a coroutine function or an async generator function).
Behavior = Callable[..., Any]


def rewrap_handler(
    handler: Handler, wrap_unary: Callable[[Behavior], Behavior], wrap_stream: Callable[[Behavior], Behavior]
) -> Handler:
    """The handler with its behaviour wrapped: `wrap_unary` for unary-response calls (unary-unary and
    stream-unary), `wrap_stream` for streaming-response ones. What server interceptors build on."""
    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(wrap_unary(handler.unary_unary), **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(wrap_unary(handler.stream_unary), **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(wrap_stream(handler.unary_stream), **kwargs)
    # The one kind left: set (a handler serves exactly one kind), though the stubs type each as optional.
    return grpc.stream_stream_rpc_method_handler(wrap_stream(cast(Behavior, handler.stream_stream)), **kwargs)
