"""Fixtures for the graph tests: the graph service's own server on port 0 over real gRPC, on the real LadybugDB
engine in a fresh data directory (the entity builders are tests/support/graph.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from ragmesh.graph.v1 import graph_service_pb2_grpc as pb_grpc
from ragmesh_graph.config import GraphSettings
from ragmesh_graph.server import create_server

from tests.support.graph import GraphClient


@pytest.fixture
def start_graph() -> Callable[..., contextlib.AbstractAsyncContextManager[GraphClient]]:
    """`async with start_graph(data_dir, **settings) as graph:` the graph service on port 0 over `data_dir`,
    stopped (its databases closed) on exit."""

    @contextlib.asynccontextmanager
    async def start(data_dir: Path, **overrides: Any) -> AsyncIterator[GraphClient]:
        local = {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "data_dir": data_dir}
        settings = GraphSettings(**{**local, **overrides})
        service = create_server(settings)
        await service.start()
        addr = f"127.0.0.1:{service.port}"
        channel = grpc.aio.insecure_channel(addr)
        try:
            yield GraphClient(pb_grpc.GraphServiceStub(channel), addr, settings)
        finally:
            await channel.close()
            await service.stop(0)

    return start


@pytest.fixture
async def graph(start_graph, tmp_path) -> AsyncIterator[GraphClient]:
    """A graph service over a fresh data directory."""
    async with start_graph(tmp_path) as client:
        yield client
