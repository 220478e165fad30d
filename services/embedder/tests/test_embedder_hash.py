"""The hash backend: deterministic test/dev vectors where shared words mean similarity."""

from __future__ import annotations

import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.vectors import dense_rows
from ragmesh_embedder.backends import HashBackend


async def test_hash_vectors_are_deterministic_unit_and_word_sensitive(hashed, vectors):
    texts = ["red apple pie", "red apple tart", "quantum field theory"]
    reply = await hashed.stub.Embed(pb2.EmbedRequest(texts=texts))
    pie, tart, physics = vectors(reply.embeddings)
    again = vectors((await hashed.stub.Embed(pb2.EmbedRequest(texts=texts))).embeddings)
    np.testing.assert_array_equal(again, [pie, tart, physics])
    # A fresh instance (another process would be the same) gives identical vectors: no per-process seed.
    fresh = HashBackend(384)
    np.testing.assert_allclose(fresh.embed_texts(texts), [pie, tart, physics], atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm([pie, tart, physics], axis=1), 1.0, atol=1e-6)
    assert pie @ tart > 0.3 > abs(pie @ physics)
    assert reply.model_id == "ragmesh/hash-384" and reply.dimension == 384
    assert [e.token_count for e in reply.embeddings] == [3, 3, 3]


async def test_get_model_info_names_the_hash_backend(hashed):
    info = await hashed.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert (info.backend, info.dimension, info.max_batch_size, info.sparse_model_id) == (
        "hash",
        384,
        4,
        "qdrant/bm25",
    )


async def test_packed_dense_vectors_equal_the_float_lists(hashed):
    texts = ["red apple pie", "quantum field theory", "a third text"]
    floats = await hashed.stub.Embed(pb2.EmbedRequest(texts=texts))
    packed = await hashed.stub.Embed(pb2.EmbedRequest(texts=texts, dense_format=pb2.DENSE_FORMAT_PACKED_FLOAT32))
    assert not floats.HasField("dense_matrix")
    matrix = packed.dense_matrix
    assert (matrix.rows, matrix.columns, len(matrix.data)) == (3, 384, 3 * 384 * 4)
    assert all(not embedding.dense for embedding in packed.embeddings)
    # Bit for bit the same numbers, whichever way they travel (and as numpy reads them).
    assert dense_rows(packed) == dense_rows(floats) == [list(embedding.dense) for embedding in floats.embeddings]
    np.testing.assert_array_equal(
        np.frombuffer(packed.dense_matrix.data, "<f4").reshape(3, 384), np.array(dense_rows(floats), dtype=np.float32)
    )
    # Everything else in the response is unchanged.
    for a, b in zip(floats.embeddings, packed.embeddings, strict=True):
        assert (a.token_count, a.truncated, a.sparse) == (b.token_count, b.truncated, b.sparse)
    # Sparse only: there is no dense matrix to send.
    sparse_only = await hashed.stub.Embed(
        pb2.EmbedRequest(texts=texts, kinds=[pb2.VECTOR_KIND_SPARSE], dense_format=pb2.DENSE_FORMAT_PACKED_FLOAT32)
    )
    assert not sparse_only.HasField("dense_matrix") and dense_rows(sparse_only) == [[], [], []]


def test_a_malformed_dense_matrix_is_refused():
    response = pb2.EmbedResponse(
        embeddings=[pb2.Embedding()], dense_matrix=pb2.DenseMatrix(data=b"\0" * 12, rows=1, columns=4)
    )
    with pytest.raises(ValueError, match="cannot hold 1 x 4"):
        dense_rows(response)
