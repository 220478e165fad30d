"""The embedder on a CUDA GPU, over real gRPC: skipped where torch sees no GPU (CI has none; run it on a GPU node
with `python -m pytest services/embedder/tests/test_embedder_cuda.py`). Self-contained (no fixtures), so that it
runs with plain pytest on a GPU machine beside the image's own torch."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import grpc
import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_common.tokens import packed_ids, tokenizer_fingerprint
from ragmesh_common.vectors import dense_rows
from ragmesh_embedder.backends import _torch_has_cuda
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.cuda import graph_shapes, token_buckets
from ragmesh_embedder.server import create_server
from ragmesh_embedder.service import build_embedder

pytestmark = [
    pytest.mark.slow,  # the real model on a GPU
    pytest.mark.skipif(not _torch_has_cuda(), reason="no CUDA GPU here: torch.cuda.is_available() is False"),
]

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _texts() -> list[str]:
    """Real prose and code of many lengths: the docs pages' paragraphs, some longer than the model's window."""
    pages = "\n\n".join(page.read_text(encoding="utf-8") for page in sorted(DOCS.rglob("*.md")))
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", pages) if p.strip()]
    return paragraphs[:300]


def _cpu_vectors(texts: list[str]) -> np.ndarray:
    """The same model on the CPU in fp32 (torch), through the embedder's own domain layer."""
    embedder = build_embedder(EmbedderSettings(port=0, device="cpu", runtime="torch", precision="fp32"))
    try:
        return asyncio.run(_dense(embedder, texts))
    finally:
        embedder.close()


async def _dense(embedder, texts: list[str]) -> np.ndarray:
    from ragmesh_embedder.service import InputType

    result = await embedder.embed(texts, InputType.DOCUMENT, dense=True, sparse=False)
    return result.dense


async def _served_on_the_gpu(texts: list[str], query: str):
    import torch

    settings = EmbedderSettings(port=0, device="cuda")
    embedder = build_embedder(settings)
    # RAGMESH_EMBEDDER_CUDNN_ATTENTION's default: no cuDNN attention, which builds a plan per new shape.
    cudnn_attention = torch.backends.cuda.cudnn_sdp_enabled()
    service = create_server(settings, embedder)
    await service.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{service.port}") as channel:
            stub = pb2_grpc.EmbedderServiceStub(channel)
            info = (await stub.GetModelInfo(pb2.GetModelInfoRequest())).models[0]
            dense = [pb2.VECTOR_KIND_DENSE]
            requests = [
                pb2.EmbedRequest(texts=texts[i : i + 64], kinds=dense, dense_format=pb2.DENSE_FORMAT_PACKED_FLOAT32)
                for i in range(0, len(texts), 64)
            ]
            replies = await asyncio.gather(*(stub.Embed(r, timeout=120) for r in requests))  # batched together
            served = np.array([row for reply in replies for row in dense_rows(reply)], dtype=np.float32)
            lone = await stub.Embed(pb2.EmbedRequest(texts=[query], kinds=dense, input_type=pb2.INPUT_TYPE_QUERY))
            # The texts with their token ids, as the indexer sends them: not tokenised again, the same vectors.
            tokenizer_json = Path(settings.model_path) / "tokenizer.json"
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_json))
            tokenizer.no_padding()
            tokenizer.enable_truncation(info.max_sequence_length)
            ids = [e.ids for e in tokenizer.encode_batch(texts[:64])]
            with_ids = await stub.Embed(
                pb2.EmbedRequest(
                    texts=texts[:64],
                    kinds=dense,
                    dense_format=pb2.DENSE_FORMAT_PACKED_FLOAT32,
                    token_ids=pb2.TokenIds(
                        tokenizer=tokenizer_fingerprint(tokenizer_json),
                        ids=packed_ids(ids),
                        lengths=list(map(len, ids)),
                    ),
                )
            )
        return (
            info,
            cudnn_attention,
            served,
            np.array(dense_rows(lone)[0], dtype=np.float32),
            np.array(dense_rows(with_ids), dtype=np.float32),
        )
    finally:
        await service.stop(0)
        embedder.close()


def test_the_gpu_serves_the_cpu_models_vectors_in_fp16():
    texts = _texts()
    query = "how does the embedder batch texts on a GPU?"
    info, cudnn_attention, served, lone, with_ids = asyncio.run(_served_on_the_gpu(texts, query))
    assert (info.runtime, info.device, info.precision) == ("torch", "cuda", "fp16")
    assert not cudnn_attention
    cpu = _cpu_vectors([*texts, query])
    assert served.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-3)
    # fp16 rounding only: every text's vector points where the CPU's fp32 one does.
    cosines = np.sum(served * cpu[:-1], axis=1)
    assert cosines.min() > 0.999, f"lowest cosine to the CPU's vectors: {cosines.min():.5f}"
    assert float(lone @ cpu[-1]) > 0.999
    np.testing.assert_allclose(with_ids, served[:64], atol=2e-3)


def test_cuda_graphs_give_the_eager_models_vectors_and_capture_each_shape_once():
    texts = _texts()
    eager = build_embedder(EmbedderSettings(port=0, device="cuda"))
    graphed = build_embedder(EmbedderSettings(port=0, device="cuda", cuda_graphs=True))
    try:
        plain = asyncio.run(_dense(eager, texts))
        first = asyncio.run(_dense(graphed, texts))
        graphs = graphed.backend.graphs
        shapes = len(graphs)
        again = asyncio.run(_dense(graphed, texts))
    finally:
        eager.close()
        graphed.close()
    # Every shape the batcher's micro-batches take was captured at start: serving captured nothing more.
    backend = graphed.backend
    assert (
        shapes
        == len(graphs)
        == len(graph_shapes(backend.batch_size, backend.max_batch_tokens, backend.max_sequence_length))
    )
    assert graphs.capture_seconds > 0
    # The same model on the same fp16 inputs, replayed or launched op by op: the same vectors but for rounding.
    cosines = np.sum(first * plain, axis=1)
    assert cosines.min() > 0.9999, f"lowest cosine to the eager vectors: {cosines.min():.6f}"
    np.testing.assert_allclose(again, first, atol=2e-3)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "cuda-graphs"])
def test_unpadded_micro_batches_give_the_padded_models_vectors(graphs):
    # RAGMESH_EMBEDDER_UNPADDED: the texts' real tokens back to back, flash attention's variable-length kernel; with
    # CUDA_GRAPHS, one graph per token bucket, every one captured at start.
    texts = _texts()
    padded = build_embedder(EmbedderSettings(port=0, device="cuda"))
    unpadded = build_embedder(EmbedderSettings(port=0, device="cuda", unpadded=True, cuda_graphs=graphs))
    try:
        backend = unpadded.backend
        assert padded.backend.unpadded is None and backend.unpadded is not None and backend.graphs is None
        plain = asyncio.run(_dense(padded, texts))
        packed = asyncio.run(_dense(unpadded, texts))
        again = asyncio.run(_dense(unpadded, texts))
    finally:
        padded.close()
        unpadded.close()
    if graphs:
        assert len(backend.unpadded.graphs) == len(token_buckets(backend.max_batch_tokens))
    # The same fp16 model, its attention run by another kernel on the same tokens: the same vectors but for rounding.
    cosines = np.sum(packed * plain, axis=1)
    assert cosines.min() > 0.9999, f"lowest cosine to the padded model's vectors: {cosines.min():.6f}"
    np.testing.assert_allclose(again, packed, atol=2e-3)
