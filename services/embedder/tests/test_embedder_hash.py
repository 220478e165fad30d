"""The hash backend: deterministic test/dev vectors where shared words mean similarity."""

from __future__ import annotations

import numpy as np
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_embedder.backends import HashBackend


async def test_hash_vectors_are_deterministic_unit_and_word_sensitive(hashed, vectors):
    texts = ["red apple pie", "red apple tart", "quantum field theory"]
    reply = await hashed.stub.Embed(pb2.EmbedRequest(texts=texts))
    pie, tart, physics = vectors(reply.embeddings)
    again = vectors((await hashed.stub.Embed(pb2.EmbedRequest(texts=texts))).embeddings)
    np.testing.assert_array_equal(again, [pie, tart, physics])
    # A fresh instance (another process would be the same) gives identical vectors: no per-process seed.
    fresh = HashBackend(384)
    np.testing.assert_allclose(fresh.embed(fresh.prepare(texts)), [pie, tart, physics], atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm([pie, tart, physics], axis=1), 1.0, atol=1e-6)
    assert pie @ tart > 0.3 > abs(pie @ physics)
    assert reply.model_id == "ragmesh/hash-384" and reply.dimension == 384
    assert [e.token_count for e in reply.embeddings] == [3, 3, 3]


async def test_get_model_info_names_the_hash_backend(hashed):
    info = await hashed.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert (info.backend, info.dimension, info.max_batch_size, info.sparse_model_id) == (
        "hash", 384, 4, "qdrant/bm25",
    )
