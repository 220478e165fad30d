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
from ragmesh_embedder.backends import HashBackend, MicroBatch
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
    """The hash backend (words count as tokens), but each model call waits until the test opens the gate:
    lets a test hold the model busy without timing anything. Records the texts of every model call, and counts
    the calls inside the model at once (`inside`, at most `most`; several with `runners` > 1)."""

    def __init__(self, *, batch_size: int = 256, max_batch_tokens: int | None = 4096, runners: int = 1) -> None:
        super().__init__(384, batch_size=batch_size, max_batch_tokens=max_batch_tokens, runners=runners)
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()
        self.inside = self.most = 0

    def embed(self, batch: MicroBatch) -> np.ndarray:
        with self._lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.entered.set()
        try:
            if not self.gate.wait(30):
                raise TimeoutError("the test never opened the gate")
            self.calls.append(list(batch.texts))
            return super().embed(batch)
        finally:
            with self._lock:
                self.inside -= 1


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


@pytest.fixture(name="gated_backend", scope="session")
def _gated_backend_class():
    return GatedBackend


@pytest.fixture(scope="session")
def reference():
    """sentence-transformers' own encode() (torch) on the same packaged model, to compare against."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(EmbedderSettings().model_path, device="cpu", local_files_only=True)


@pytest_asyncio.fixture(scope="session")
async def local() -> AsyncIterator[Running]:
    """The real all-MiniLM-L6-v2 model on ONNX Runtime in fp32 (exported once into the repository's
    .ragmesh/models cache: the same vectors as torch), loaded once for the whole session."""
    async with serve(EmbedderSettings(port=0, backend="local", precision="fp32")) as running:
        yield running


@pytest_asyncio.fixture(scope="module")
async def hashed() -> AsyncIterator[Running]:
    """A fast hash-backend server with small limits, for the reject paths."""
    settings = EmbedderSettings(port=0, backend="hash", max_texts_per_request=4, max_text_chars=50, max_queue_texts=16)
    async with serve(settings) as running:
        yield running
