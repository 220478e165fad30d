"""Builds the graph service's gRPC server (not started: the caller awaits `service.start()` / `stop()`).

The server opens no database at start-up: a collection's graph is opened on its first use and stays open (this
process is its one writer) until the server stops.
"""

from __future__ import annotations

from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as pb_grpc
from ragmesh_common.server import Service, new_server
from ragmesh_common.telemetry import setup_telemetry

from .config import GraphSettings
from .errors import DOMAIN
from .metrics import GraphMetrics
from .service import Graphs
from .servicer import GraphServicer
from .store import LadybugGraphStore


def create_server(settings: GraphSettings) -> Service:
    """The graph server over the graphs of settings.data_dir/graph."""
    telemetry = setup_telemetry("graph")
    store = LadybugGraphStore(
        settings.graphs_dir, buffer_pool_mb=settings.buffer_pool_mb, max_db_size_gb=settings.max_db_size_gb
    )
    graphs = Graphs(
        store,
        telemetry.metrics(GraphMetrics),
        query_timeout_seconds=settings.query_timeout_seconds,
        row_limit=settings.row_limit,
        max_row_limit=settings.max_row_limit,
    )
    service = new_server(
        "graph",
        settings,
        lambda server: pb_grpc.add_GraphServiceServicer_to_server(GraphServicer(graphs), server),
        [pb.DESCRIPTOR.services_by_name["GraphService"].full_name],
        domain=DOMAIN,
    )
    service.closers.append(graphs.close)
    return service
