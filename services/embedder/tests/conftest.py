"""Fixtures for the embedder tests: in-process servers on port 0, reached over real gRPC. (`rpc_error`
comes from the repository's root conftest.py.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import grpc
import numpy as np
import pytest
import pytest_asyncio
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_common.server import Service
from ragmesh_embedder.backends import HashBackend, Prepared
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.server import create_server
from ragmesh_embedder.service import Embedder, build_embedder


@dataclass
class Running:
    service: Service
    embedder: Embedder
    stub: pb2_grpc.EmbedderServiceStub


@asynccontextmanager
async def serve(settings: EmbedderSettings, embedder: Embedder | None = None) -> AsyncIterator[Running]:
    """Start an embedder server on a free port and yield it with a client stub; stop it afterwards."""
    embedder = embedder or await asyncio.to_thread(build_embedder, settings)
    service = create_server(settings, embedder)
    await service.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
    try:
        yield Running(service, embedder, pb2_grpc.EmbedderServiceStub(channel))
    finally:
        await channel.close()
        await service.stop(0)


def vectors(embeddings: Sequence) -> np.ndarray:
    return np.array([list(e.dense) for e in embeddings], dtype=np.float32)


class GatedBackend(HashBackend):
    """The hash backend, but each model call waits until the test opens the gate: lets a test hold the
    worker busy without timing anything."""

    def __init__(self) -> None:
        super().__init__(384)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        self.entered.set()
        if not self.gate.wait(30):
            raise TimeoutError("the test never opened the gate")
        return super().embed(batch)


async def until(condition, what: str) -> None:
    """Wait (without a time assertion) for something another thread does."""
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


# Helpers reach the tests as fixtures (test modules cannot import conftest under --import-mode=importlib).
@pytest.fixture(name="serve", scope="session")
def _serve_fixture():
    return serve


@pytest.fixture(name="vectors", scope="session")
def _vectors_fixture():
    return vectors


@pytest.fixture(name="until", scope="session")
def _until_fixture():
    return until


@pytest.fixture
def gated() -> Iterator[GatedBackend]:
    backend = GatedBackend()
    yield backend
    backend.gate.set()  # never leave the worker stuck if the test failed half-way


@pytest_asyncio.fixture(scope="session")
async def local() -> AsyncIterator[Running]:
    """The real all-MiniLM-L6-v2 model, loaded once for the whole session."""
    async with serve(EmbedderSettings(port=0, backend="local")) as running:
        yield running


@pytest_asyncio.fixture(scope="module")
async def hashed() -> AsyncIterator[Running]:
    """A fast hash-backend server with small limits, for the reject paths."""
    settings = EmbedderSettings(
        port=0, backend="hash", max_texts_per_request=4, max_text_chars=50, max_queue_texts=16
    )
    async with serve(settings) as running:
        yield running
