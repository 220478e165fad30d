"""The embedder with the real all-MiniLM-L6-v2 model, over real gRPC."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import numpy as np
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_common.tokens import packed_ids, tokenizer_fingerprint
from ragmesh_embedder.config import EmbedderSettings

pytestmark = pytest.mark.slow  # the real model

DENSE, SPARSE = pb2.VECTOR_KIND_DENSE, pb2.VECTOR_KIND_SPARSE
QUERY, DOCUMENT = pb2.INPUT_TYPE_QUERY, pb2.INPUT_TYPE_DOCUMENT


async def test_dense_vectors_are_384_dimensional_unit_vectors(local, vectors):
    reply = await local.stub.Embed(pb2.EmbedRequest(texts=["How do vaccines work?", "Paris is in France."]))
    assert reply.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert reply.dimension == 384
    matrix = vectors(reply.embeddings)
    assert matrix.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


async def test_vectors_equal_sentence_transformers_encode(local, vectors, reference):
    texts = ["short", "a somewhat longer sentence about the mercury thermometer and its inventor", "x y z"]
    reply = await local.stub.Embed(pb2.EmbedRequest(texts=texts, kinds=[DENSE]))
    np.testing.assert_allclose(vectors(reply.embeddings), reference.encode(texts), atol=1e-5)


async def test_a_paraphrase_scores_higher_than_an_unrelated_text(local, vectors):
    texts = [
        "How do I reset my password?",
        "What are the steps to change a forgotten password?",
        "The Amazon river flows into the Atlantic Ocean.",
    ]
    query, paraphrase, unrelated = vectors((await local.stub.Embed(pb2.EmbedRequest(texts=texts))).embeddings)
    assert query @ paraphrase > query @ unrelated + 0.3


async def test_queries_and_documents_both_embed_with_their_own_bm25_weights(local):
    text = "solar solar panels on the roof"
    as_query = (await local.stub.Embed(pb2.EmbedRequest(texts=[text], input_type=QUERY))).embeddings[0]
    as_document = (await local.stub.Embed(pb2.EmbedRequest(texts=[text], input_type=DOCUMENT))).embeddings[0]
    assert len(as_query.dense) == len(as_document.dense) == 384
    # A query term counts once; in a document the repeated "solar" weighs more than "roof".
    assert set(as_query.sparse.values) == {1.0}
    weights = dict(zip(as_document.sparse.indices, as_document.sparse.values, strict=True))
    assert max(weights.values()) > min(weights.values())
    assert set(as_query.sparse.indices) == set(weights)


async def test_sparse_vectors_are_non_empty_with_ascending_indices(local):
    reply = await local.stub.Embed(
        pb2.EmbedRequest(texts=["The quick brown fox jumps over the lazy dog near the river bank"])
    )
    sparse = reply.embeddings[0].sparse
    assert len(sparse.indices) >= 5
    assert len(sparse.values) == len(sparse.indices)
    assert list(sparse.indices) == sorted(set(sparse.indices))
    assert all(value > 0 for value in sparse.values)


async def test_kinds_select_dense_or_sparse_only(local):
    dense_only = (await local.stub.Embed(pb2.EmbedRequest(texts=["hello world"], kinds=[DENSE]))).embeddings[0]
    sparse_only = (await local.stub.Embed(pb2.EmbedRequest(texts=["hello world"], kinds=[SPARSE]))).embeddings[0]
    assert len(dense_only.dense) == 384 and not dense_only.sparse.indices
    assert not sparse_only.dense and len(sparse_only.sparse.indices) == 2
    assert dense_only.token_count == sparse_only.token_count == 4  # [CLS] hello world [SEP]


async def test_a_long_text_reports_truncation_and_its_true_token_count(local, vectors, reference):
    long_text = " ".join(f"word{i % 50}" for i in range(2000))
    reply = await local.stub.Embed(pb2.EmbedRequest(texts=[long_text, "a short text"], kinds=[DENSE]))
    long, short = reply.embeddings
    assert long.truncated and long.token_count > 256
    assert not short.truncated and short.token_count == 5
    # Only the first 256 tokens are embedded, exactly as sentence-transformers truncates.
    np.testing.assert_allclose(vectors([long]), reference.encode([long_text]), atol=1e-5)


async def test_a_lone_query_is_tokenised_and_cut_as_in_a_batch(local, vectors, reference):
    # 511 characters, 258 tokens: a lone text this short is tokenised on the event loop, in a batch of its own.
    text = " ".join(["x"] * 256)
    alone = (await local.stub.Embed(pb2.EmbedRequest(texts=[text], input_type=QUERY, kinds=[DENSE]))).embeddings[0]
    batched = (
        await local.stub.Embed(pb2.EmbedRequest(texts=[text, "a short text"], input_type=QUERY, kinds=[DENSE]))
    ).embeddings[0]
    assert (alone.token_count, alone.truncated) == (batched.token_count, batched.truncated) == (258, True)
    np.testing.assert_allclose(vectors([alone]), reference.encode([text]), atol=1e-5)


async def test_get_model_info_describes_the_local_model(local):
    info = await local.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert (info.model_id, info.dimension, info.max_sequence_length) == (
        "sentence-transformers/all-MiniLM-L6-v2",
        384,
        256,
    )
    assert (info.backend, info.sparse_model_id, info.max_batch_size) == ("local", "qdrant/bm25", 512)
    assert (info.runtime, info.device, info.precision) == ("onnx", "cpu", "fp32")


async def test_concurrent_requests_come_back_in_order_and_equal_to_one_by_one(local, vectors):
    requests = [[f"passage number {i} about topic {i % 3}", f"{'long ' * (i % 7)}text {i}"] for i in range(20)]
    alone = [vectors((await local.stub.Embed(pb2.EmbedRequest(texts=texts))).embeddings) for texts in requests]
    batches_before = local.embedder.batcher.batches_run
    together = await asyncio.gather(*(local.stub.Embed(pb2.EmbedRequest(texts=texts)) for texts in requests))
    for expected, reply in zip(alone, together, strict=True):
        np.testing.assert_allclose(vectors(reply.embeddings), expected, atol=1e-5)
    # 40 texts arrived at once: they shared micro-batches instead of running one request at a time.
    assert local.embedder.batcher.batches_run - batches_before < 20


async def test_embed_stream_answers_every_request_by_id(local, vectors):
    batches = {f"req-{i}": [f"stream text {i}", f"another stream text {i * 7}"] for i in range(6)}

    async def requests():
        for request_id, texts in batches.items():
            yield pb2.EmbedStreamRequest(request_id=request_id, texts=texts, kinds=[DENSE])

    answers = {reply.request_id: reply async for reply in local.stub.EmbedStream(requests())}
    assert set(answers) == set(batches)
    for request_id, texts in batches.items():
        unary = await local.stub.Embed(pb2.EmbedRequest(texts=texts, kinds=[DENSE]))
        assert answers[request_id].dimension == 384
        np.testing.assert_allclose(vectors(answers[request_id].embeddings), vectors(unary.embeddings), atol=1e-5)


def _token_ids(texts: list[str]) -> pb2.TokenIds:
    """The texts as the model's own tokenizer gives them, special tokens included (what the indexer sends)."""
    from tokenizers import Tokenizer

    tokenizer_json = Path(EmbedderSettings().model_path) / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    ids = [tokenizer.encode(text).ids for text in texts]
    return pb2.TokenIds(
        tokenizer=tokenizer_fingerprint(tokenizer_json), ids=packed_ids(ids), lengths=[len(i) for i in ids]
    )


async def test_the_model_names_its_tokenizer_for_callers_that_send_token_ids(local):
    info = await local.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert info.tokenizer == tokenizer_fingerprint(Path(EmbedderSettings().model_path) / "tokenizer.json")
    assert len(info.tokenizer) == 16 and [m.tokenizer for m in info.models] == [info.tokenizer]


async def test_texts_sent_with_their_token_ids_embed_as_the_texts_alone(local, vectors):
    texts = ["short", "a somewhat longer sentence about the mercury thermometer and its inventor", "x y z"]
    plain = await local.stub.Embed(pb2.EmbedRequest(texts=texts, input_type=DOCUMENT))
    registry = setup_telemetry("embedder").registry

    def pretokenized() -> float:
        return registry.get_sample_value("ragmesh_embedder_pretokenized_texts_total", {"model": "default"}) or 0.0

    before = pretokenized()
    given = await local.stub.Embed(pb2.EmbedRequest(texts=texts, input_type=DOCUMENT, token_ids=_token_ids(texts)))
    np.testing.assert_allclose(vectors(given.embeddings), vectors(plain.embeddings), atol=1e-5)
    assert [e.token_count for e in given.embeddings] == [e.token_count for e in plain.embeddings]
    assert [list(e.sparse.indices) for e in given.embeddings] == [list(e.sparse.indices) for e in plain.embeddings]
    assert not any(e.truncated for e in given.embeddings)
    # The texts were not tokenised here: the metric operators read says how many came with their tokens.
    assert pretokenized() - before == 3


def _micro_batch(backend, texts: list[str]):
    """The texts as the batcher hands them to a model thread: token ids right-padded to the longest, and the mask."""
    from ragmesh_embedder.backends import MicroBatch

    prepared = backend.prepare(texts)
    ids = np.full((len(texts), int(prepared.lengths.max())), backend.pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, (start, length) in enumerate(zip(prepared.starts, prepared.lengths, strict=True)):
        ids[row, :length], mask[row, :length] = prepared.ids[start : start + length], 1
    return MicroBatch(len(texts), input_ids=ids, attention_mask=mask)


def _per_text_attention(q, k, v, starts, longest: int):
    """What flash attention's variable-length kernel computes (CUDA only), text by text with torch's SDPA: each
    text's tokens attend to that text's tokens only. Tokens of no text (a row padded for CUDA graphs) get NaN, as
    a kernel that leaves them unwritten could leave anything there: none of it may reach a text's vector."""
    import torch

    out = torch.full_like(q, float("nan"))
    texts = [(start, end) for start, end in itertools.pairwise(starts.tolist()) if end > start]
    assert longest >= max((end - start for start, end in texts), default=0)
    for start, end in texts:
        out[start:end] = torch.nn.functional.scaled_dot_product_attention(
            *(t[start:end].transpose(0, 1) for t in (q, k, v))
        ).transpose(0, 1)
    return out


def _eager_capture(run):
    """The CUDA capture stood in for on the CPU: the model run eagerly on the shape's own tensors, as a replay is."""
    output = run()
    return (lambda: output.copy_(run())), output


def test_unpadded_micro_batches_give_the_padded_models_vectors():
    # What RAGMESH_EMBEDDER_UNPADDED does on CUDA, checked on the CPU with the real model: the texts' real tokens
    # back to back in one row, the attention bounded per text (CUDA's kernel stood in for by SDPA text by text).
    # Had a text's tokens attended to its neighbours', or been placed at the wrong positions, its vector would move.
    import torch
    from ragmesh_embedder.backends import create_backend
    from ragmesh_embedder.cuda import Unpadded

    settings = EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32")
    backend = create_backend(settings)
    unpadded = Unpadded(backend._model, settings.model_path, torch, "cpu", _per_text_attention)
    texts = [
        "egg protein",
        "the mercury thermometer was invented by Daniel Gabriel Fahrenheit in 1714 in Amsterdam",
        "a",
        "what is the capital of Australia? " * 40,  # cut to the model's window
        "how many grams of protein are in an egg, and in its white alone? " * 15,
    ]
    micro = _micro_batch(backend, texts)
    # More tokens in the one row than the model has positions (512): each token takes its position in its own text.
    assert micro.input_ids.shape == (5, backend.max_sequence_length) and micro.attention_mask.sum() > 512
    padded = backend.embed(micro)
    with torch.inference_mode():
        vectors = unpadded(micro.input_ids, micro.attention_mask)
    np.testing.assert_allclose(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), padded, atol=1e-5)
    lone = _micro_batch(backend, ["a query"])
    with torch.inference_mode():
        alone = unpadded(lone.input_ids, lone.attention_mask)
    np.testing.assert_allclose(alone / np.linalg.norm(alone), backend.embed(lone), atol=1e-5)
    # The padded model is left as it was: its attention is not the unpadded one.
    np.testing.assert_allclose(backend.embed(micro), padded, atol=1e-6)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "cuda-graphs"])
async def test_the_service_unpadded_serves_the_padded_services_vectors(graphs):
    # The embedder's own path with RAGMESH_EMBEDDER_UNPADDED, with and without CUDA_GRAPHS (on CUDA; here the torch
    # backend on the CPU with the CUDA kernel and capture stood in for): the batcher's micro-batches of many texts,
    # each run unpadded, the vectors returned in the texts' order.
    import torch
    from ragmesh_embedder.cuda import Unpadded
    from ragmesh_embedder.service import InputType, build_embedder

    settings = EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32")
    padded, unpadded = build_embedder(settings), build_embedder(settings)
    backend = unpadded.backend
    backend.unpadded = Unpadded(backend._model, settings.model_path, torch, "cpu", _per_text_attention)
    if graphs:
        backend.unpadded.capture_graphs(
            backend.batch_size, backend.max_batch_tokens, backend.max_sequence_length, capture=_eager_capture
        )
        captured = len(backend.unpadded.graphs)
    words = "the mercury thermometer was invented by Daniel Gabriel Fahrenheit in Amsterdam in 1714".split()
    texts = [" ".join(words[: 1 + i % len(words)] * (1 + i // 7)) for i in range(60)]  # 1 to 104 words
    try:
        plain = (await padded.embed(texts, InputType.DOCUMENT, dense=True, sparse=False)).dense
        served = (await unpadded.embed(texts, InputType.DOCUMENT, dense=True, sparse=False)).dense
    finally:
        padded.close()
        unpadded.close()
    assert served.shape == (60, 384)
    np.testing.assert_allclose(served, plain, atol=1e-5)
    if graphs:  # every micro-batch found its bucket's graph: none was captured while serving
        assert len(backend.unpadded.graphs) == captured == 4  # 64, 128, 256 and 512 tokens (the CPU's budget)


def test_unpadded_cuda_graphs_give_each_micro_batch_its_own_vectors_in_a_row_padded_to_its_bucket():
    # RAGMESH_EMBEDDER_CUDA_GRAPHS with UNPADDED: one graph per token bucket, each micro-batch's row padded to its
    # bucket with tokens of no text and its texts to the batch size with empty ones. Micro-batches sharing a bucket
    # must each get their own vectors, whatever the padding holds (NaN here), and one too large for the graphs
    # runs as it would without them.
    import torch
    from ragmesh_embedder.backends import create_backend
    from ragmesh_embedder.cuda import Unpadded, token_buckets

    settings = EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32")
    backend = create_backend(settings)
    unpadded = Unpadded(backend._model, settings.model_path, torch, "cpu", _per_text_attention)
    unpadded.capture_graphs(4, 512, backend.max_sequence_length, capture=_eager_capture)
    assert token_buckets(512) == [64, 128, 256, 512] and len(unpadded.graphs) == 4
    protein = _micro_batch(
        backend,
        [
            "how many grams of protein are in an egg? " * 20,  # 202 + 112 tokens
            "egg protein, in the white and in the yolk " * 10,
        ],
    )
    australia = _micro_batch(
        backend,
        [
            "what is the capital city of Australia, and why not Sydney? " * 16,  # 210 + 74
            "canberra was chosen as a compromise " * 12,
        ],
    )
    lone = _micro_batch(backend, ["a query"])
    five = _micro_batch(backend, ["one", "two words", "three more words", "and four of them", "five"])
    assert 256 < protein.attention_mask.sum() <= 512 and 256 < australia.attention_mask.sum() <= 512
    with torch.inference_mode():
        first, second = (
            unpadded(protein.input_ids, protein.attention_mask),
            unpadded(australia.input_ids, australia.attention_mask),
        )
        alone, beyond = unpadded(lone.input_ids, lone.attention_mask), unpadded(five.input_ids, five.attention_mask)
        again = unpadded(protein.input_ids, protein.attention_mask)
    assert len(unpadded.graphs) == 4  # nothing captured while serving; five texts ran without a graph
    for vectors, micro in ((first, protein), (second, australia), (alone, lone), (beyond, five), (again, protein)):
        assert vectors.shape == (micro.size, 384)
        np.testing.assert_allclose(
            vectors / np.linalg.norm(vectors, axis=1, keepdims=True), backend.embed(micro), atol=1e-5
        )


def test_unpadded_refuses_a_model_that_does_not_pool_by_mean(tmp_path):
    import json

    import torch
    from ragmesh_common.config import ConfigError
    from ragmesh_embedder.cuda import Unpadded

    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})
    )
    with pytest.raises(ConfigError, match=r"RAGMESH_EMBEDDER_UNPADDED=false") as raised:
        Unpadded(None, str(tmp_path), torch, "cpu", _per_text_attention)
    assert "pooling_mode_cls_token" in str(raised.value)


def test_unpadded_in_fp32_on_a_gpu_stops_the_start_with_the_settings_to_change():
    # Flash attention takes fp16 (or bf16): a GPU pod told to run fp32 and unpadded fails at start, not per request.
    from ragmesh_common.config import ConfigError
    from ragmesh_embedder.backends import Plan, TorchBackend

    settings = EmbedderSettings(port=0, runtime="torch", precision="fp32", unpadded=True)
    plan = Plan(
        runtime="torch", device="cuda", precision="fp32", threads=1, runners=1, batch_size=1024, max_batch_tokens=131072
    )
    with pytest.raises(ConfigError, match=r"RAGMESH_EMBEDDER_PRECISION=fp16 \(or auto\)"):
        TorchBackend(settings, plan)


def test_unpadded_without_torchs_variable_length_attention_names_the_setting(monkeypatch):
    import sys

    import torch
    from ragmesh_common.config import ConfigError
    from ragmesh_embedder.cuda import flash_varlen

    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)  # as on torch < 2.10
    with pytest.raises(ConfigError, match=r"torch >= 2\.10.*RAGMESH_EMBEDDER_UNPADDED=false"):
        flash_varlen(torch)


def test_padding_a_micro_batch_to_its_gpu_shape_leaves_every_vector_as_it_was():
    # What the torch backend does on CUDA (gpu_shape), checked here on the CPU with the real model: extra rows and
    # columns change nothing in the texts' own vectors.
    from ragmesh_embedder.backends import MicroBatch, create_backend
    from ragmesh_embedder.cuda import gpu_shape, pad_to_gpu_shape

    assert [gpu_shape(rows, 7, 256) for rows in (1, 3, 64, 65, 400, 1024)] == [
        (1, 16),
        (4, 16),
        (64, 16),
        (128, 16),
        (448, 16),
        (1024, 16),
    ]
    assert [gpu_shape(5, width, 256)[1] for width in (16, 17, 250, 256)] == [16, 32, 256, 256]
    backend = create_backend(EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32"))
    micro = _micro_batch(backend, ["short", "a somewhat longer sentence about the mercury thermometer", "x y z"])
    ids, mask, width = micro.input_ids, micro.attention_mask, micro.input_ids.shape[1]
    padded_ids, padded_mask = pad_to_gpu_shape(ids, mask, backend.pad_id, backend.max_sequence_length)
    assert padded_ids.shape == gpu_shape(3, width, 256) == (4, 16)
    plain = backend.embed(MicroBatch(3, input_ids=ids, attention_mask=mask))
    padded = backend.embed(MicroBatch(4, input_ids=padded_ids, attention_mask=padded_mask))
    np.testing.assert_allclose(padded[:3], plain, atol=1e-5)
    # The backend's hand-off to cuda.embed (RAGMESH_EMBEDDER_GPU_SHAPES on CUDA) pads to that shape and keeps the
    # micro-batch's own rows only.
    backend.bucketed = True
    np.testing.assert_allclose(backend.embed(micro), plain, atol=1e-5)


def test_shape_graphs_give_each_micro_batch_its_own_vectors_however_shapes_recur():
    # What RAGMESH_EMBEDDER_CUDA_GRAPHS does on CUDA, checked on the CPU with the real model: the capture is stood in
    # for by running the model eagerly on each shape's own input and output tensors, which is what a replay reads
    # and writes. Micro-batches of one bucket share those tensors; every call must still get its own vectors.
    import torch
    from ragmesh_embedder.backends import MicroBatch, create_backend
    from ragmesh_embedder.cuda import ShapeGraphs, gpu_shape, pad_to_gpu_shape

    def eager(run):
        output = run()
        return (lambda: output.copy_(run())), output

    backend = create_backend(EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32"))
    graphs = ShapeGraphs(backend.forward, torch, "cpu", capture=eager)

    def batch(texts: list[str]) -> MicroBatch:
        return _micro_batch(backend, texts)

    def through_graphs(micro: MicroBatch) -> np.ndarray:
        ids, mask = pad_to_gpu_shape(micro.input_ids, micro.attention_mask, backend.pad_id, backend.max_sequence_length)
        return graphs(ids, mask)[: micro.size]

    four = batch(
        ["the mercury thermometer was invented by Daniel Gabriel Fahrenheit in 1714 in Amsterdam"] * 2
        + ["how many grams of protein are in an egg", "what is the capital city of Australia today"]
    )
    three = batch(
        [
            "who invented the mercury thermometer and the temperature scale named after him, and when did he live",
            "egg protein",
            "capital of Australia",
        ]
    )
    lone = batch(["a query"])
    limit = backend.max_sequence_length
    # Different micro-batches of one shape: (4, 32), from 4 x 20 and 3 x 22 tokens.
    assert gpu_shape(*four.input_ids.shape, limit) == gpu_shape(*three.input_ids.shape, limit) == (4, 32)
    assert four.input_ids.shape != three.input_ids.shape
    first = through_graphs(four)
    kept = first.copy()
    second = through_graphs(three)
    through_graphs(lone)
    again = through_graphs(four)
    assert len(graphs) == 2  # (4, 32) and (1, 16): a shape that recurs is not captured again
    np.testing.assert_array_equal(first, kept)  # what a call returned is its own, not the shape's output tensor
    np.testing.assert_allclose(first, backend.embed(four), atol=1e-5)
    np.testing.assert_allclose(second, backend.embed(three), atol=1e-5)
    np.testing.assert_allclose(again, first, atol=1e-6)
    assert graphs.capture_seconds > 0
    graphs.capture_all([(4, 32), (2, 16)])  # what the backend does at start on CUDA: only the new one is captured
    assert len(graphs) == 3
    np.testing.assert_allclose(
        through_graphs(batch(["egg protein", "capital of Australia"])),
        backend.embed(batch(["egg protein", "capital of Australia"])),
        atol=1e-5,
    )
    assert len(graphs) == 3


def test_graph_shapes_are_every_shape_a_micro_batch_within_the_budget_pads_to():
    # The shapes CUDA graphs are captured for at start: all the batcher can cut (at most batch_size texts, texts x
    # longest text within the budget, or one text alone), and no other.
    from ragmesh_embedder.cuda import gpu_shape, graph_shapes

    for batch_size, budget, limit in ((1024, 131072, 256), (300, 4096, 128)):
        shapes = graph_shapes(batch_size, budget, limit)
        reachable = {
            gpu_shape(n, width, limit)
            for n in range(1, batch_size + 1)
            for width in range(1, limit + 1)
            if n == 1 or n * width <= budget
        }
        assert set(shapes) == reachable and len(shapes) == len(reachable)
    assert len(graph_shapes(1024, 131072, 256)) == 320


def test_a_model_that_cannot_be_captured_as_a_cuda_graph_stops_the_start_with_the_setting_to_change():
    # On CUDA the backend captures every shape at start; an operation not permitted while capturing (a model whose
    # code reads a tensor's value on the host) must stop the start-up with what to do, not fail requests later.
    import torch
    from ragmesh_common.config import ConfigError
    from ragmesh_embedder.backends import create_backend
    from ragmesh_embedder.cuda import ShapeGraphs

    def refused(run):
        raise RuntimeError("operation not permitted when stream is capturing")

    backend = create_backend(EmbedderSettings(port=0, runtime="torch", device="cpu", precision="fp32"))
    graphs = ShapeGraphs(backend.forward, torch, "cpu", capture=refused)
    with pytest.raises(ConfigError) as raised:
        graphs.capture_all([(1, 16), (2, 16)])
    message = str(raised.value)
    assert "RAGMESH_EMBEDDER_CUDA_GRAPHS=false" in message and "(1, 16)" in message
    assert "operation not permitted when stream is capturing" in message
    assert len(graphs) == 0
