"""Dynamic batching, made deterministic by a backend that holds the worker until the test lets it go."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_embedder.backends import HashBackend
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder

SETTINGS = EmbedderSettings(port=0, backend="hash", batch_size=4)


async def test_requests_queued_together_share_sorted_micro_batches(serve, until, gated, vectors):
    async with serve(SETTINGS, Embedder(gated, SETTINGS)) as running:
        batcher = running.embedder.batcher
        first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["first"])))
        await until(gated.entered.is_set, "the worker took the first request")
        texts = [[f"{'word ' * (i + 1)}request {i}", f"short {i}"] for i in range(5)]
        rest = [asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=t))) for t in texts]
        await until(lambda: batcher.queue_depth == 11, "five more requests queued")
        gated.gate.set()
        replies = await asyncio.gather(first, *rest)
        # The 10 queued texts ran as micro-batches of 4, 4 and 2 (not five requests one by one)...
        assert list(batcher.last_batch_sizes) == [1, 4, 4, 2]
        assert batcher.queue_depth == 0 and batcher.texts_processed == 11
        # ...and every caller still got its own vectors, in its own order.
        reference = HashBackend(384)
        for request_texts, reply in zip(texts, replies[1:], strict=True):
            expected = reference.embed(reference.prepare(request_texts))
            np.testing.assert_allclose(vectors(reply.embeddings), expected, atol=1e-6)


async def test_texts_of_a_caller_that_gave_up_are_skipped(serve, rpc_error, until, gated):
    async with serve(SETTINGS, Embedder(gated, SETTINGS)) as running:
        batcher = running.embedder.batcher
        first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["first"])))
        await until(gated.entered.is_set, "the worker took the first request")
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["late", "later"]), timeout=0.2))
        assert error.code == grpc.StatusCode.DEADLINE_EXCEEDED
        gated.gate.set()
        await first
        await until(lambda: batcher.queue_depth == 0, "the queue drained")
        assert batcher.texts_processed == 1
