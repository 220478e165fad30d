"""Builds the converter's gRPC server (not started: the caller awaits `service.start()` / `stop()`)."""

from __future__ import annotations

import httpx
from ragmesh.converter.v1 import converter_service_pb2_grpc as pb_grpc
from ragmesh_common.server import Service, new_server

from .config import ConverterSettings
from .errors import DOMAIN
from .service import Converter
from .servicer import SERVICE_NAME, ConverterServicer


def create_server(settings: ConverterSettings, *, http_transport: httpx.AsyncBaseTransport | None = None) -> Service:
    """The converter service on settings.host:settings.port with health and reflection.

    `http_transport` replaces the network under URL fetches (tests route a fake public address to a local
    server with it); by default httpx connects for real.
    """
    converter = Converter(settings, http_transport=http_transport)
    servicer = ConverterServicer(converter)
    service = new_server(
        "converter",
        settings,
        lambda server: pb_grpc.add_ConverterServiceServicer_to_server(servicer, server),
        service_names=[SERVICE_NAME],
        domain=DOMAIN,
    )
    service.closers.append(converter.close)
    return service
