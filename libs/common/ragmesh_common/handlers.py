"""What server interceptors build on: a method handler with its behaviour wrapped (`server.ErrorInterceptor`,
`telemetry.MetricsInterceptor`, `meshauth.MeshTokenServerInterceptor`)."""

from __future__ import annotations

from collections.abc import Callable

import grpc


def rewrap_handler(handler: grpc.RpcMethodHandler, wrap_unary: Callable, wrap_stream: Callable):
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
    return grpc.stream_stream_rpc_method_handler(wrap_stream(handler.stream_stream), **kwargs)
