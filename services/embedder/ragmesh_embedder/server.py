"""Builds the embedder's gRPC server (not started: the caller awaits `service.start()` / `service.stop()`)."""

from __future__ import annotations

import asyncio

from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_common.server import Service, new_server

from .config import EmbedderSettings
from .service import Embedder, build_embedder
from .servicer import EmbedderServicer

DOMAIN = "embedder.ragmesh"
SERVICE_NAME = pb2.DESCRIPTOR.services_by_name["EmbedderService"].full_name


def create_server(settings: EmbedderSettings, embedder: Embedder | None = None) -> Service:
    """The embedder's server. Loads and warms up the model unless `embedder` is given (build it with
    `build_embedder(settings)` to keep a handle on its batcher, e.g. for metrics). Stopping the service
    stops the embedder too."""
    embedder = embedder or build_embedder(settings)
    servicer = EmbedderServicer(embedder)
    try:
        service = new_server(
            "embedder",
            settings,
            lambda server: pb2_grpc.add_EmbedderServiceServicer_to_server(servicer, server),
            [SERVICE_NAME],
            domain=DOMAIN,
        )
    except BaseException:
        embedder.close()
        raise
    # Joining the worker thread blocks, so it runs off the event loop.
    service.closers.append(lambda: asyncio.to_thread(embedder.close))
    return service
