"""More than one model at once: an embedder serves its default model and the extra ones of
RAGMESH_EMBEDDER_EXTRA_MODELS side by side, each picked by name, each with its own batcher and queue.

Two hash backends of different dimensions stand in for an old and a new model."""

from __future__ import annotations

import asyncio
import json

import grpc
import numpy as np
import pytest
import pytest_asyncio
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.config import ConfigError, load
from ragmesh_common.telemetry import Attr, setup_telemetry
from ragmesh_embedder.backends import HashBackend
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder, build_embedder

DOMAIN = "embedder.ragmesh"
TEXTS = ["red apple pie", "quantum field theory"]


def two_models(**overrides) -> EmbedderSettings:
    """The default hash model (384 dimensions) and an extra one called "small" (64)."""
    return load(
        EmbedderSettings,
        port=0,
        backend="hash",
        extra_models=json.dumps([{"name": "small", "hash_dimension": 64}]),
        **overrides,
    )


@pytest_asyncio.fixture(scope="module")
async def both(serve):
    async with serve(two_models()) as running:
        yield running


async def test_each_model_embeds_with_its_own_dimension_and_the_default_is_unchanged(both, vectors):
    unnamed = await both.stub.Embed(pb2.EmbedRequest(texts=TEXTS))
    default = await both.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="default"))
    small = await both.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="small"))
    # A request that names no model gets exactly what it got before extra models existed.
    assert (unnamed.model, unnamed.model_id, unnamed.dimension) == ("default", "ragmesh/hash-384", 384)
    np.testing.assert_allclose(vectors(unnamed.embeddings), HashBackend(384).embed_texts(TEXTS), atol=1e-6)
    np.testing.assert_array_equal(vectors(default.embeddings), vectors(unnamed.embeddings))
    assert (small.model, small.model_id, small.dimension) == ("small", "ragmesh/hash-64", 64)
    np.testing.assert_allclose(vectors(small.embeddings), HashBackend(64).embed_texts(TEXTS), atol=1e-6)
    # BM25 does not depend on the dense model.
    assert [e.sparse for e in small.embeddings] == [e.sparse for e in unnamed.embeddings]
    packed = await both.stub.Embed(
        pb2.EmbedRequest(texts=TEXTS, model="small", dense_format=pb2.DENSE_FORMAT_PACKED_FLOAT32)
    )
    assert (packed.dense_matrix.rows, packed.dense_matrix.columns) == (2, 64)


async def test_each_request_of_a_stream_names_its_own_model(both):
    async def requests():
        for i, model in enumerate(["small", "", "default", "small"]):
            yield pb2.EmbedStreamRequest(request_id=str(i), texts=TEXTS, model=model)

    replies = {reply.request_id: reply async for reply in both.stub.EmbedStream(requests())}
    assert {i: (r.model, len(r.embeddings[0].dense)) for i, r in replies.items()} == {
        "0": ("small", 64),
        "1": ("default", 384),
        "2": ("default", 384),
        "3": ("small", 64),
    }


async def test_get_model_info_lists_every_model_and_describes_the_one_asked_for(both):
    info = await both.stub.GetModelInfo(pb2.GetModelInfoRequest())
    assert [(m.name, m.is_default, m.model_id, m.dimension, m.backend) for m in info.models] == [
        ("default", True, "ragmesh/hash-384", 384, "hash"),
        ("small", False, "ragmesh/hash-64", 64, "hash"),
    ]
    # The top-level fields keep describing the default model, as callers that know no names expect.
    assert (info.model, info.model_id, info.dimension, info.sparse_model_id) == (
        "default",
        "ragmesh/hash-384",
        384,
        "qdrant/bm25",
    )
    small = await both.stub.GetModelInfo(pb2.GetModelInfoRequest(model="small"))
    assert (small.model, small.model_id, small.dimension, small.backend) == ("small", "ragmesh/hash-64", 64, "hash")
    assert small.models == info.models


@pytest.mark.parametrize("call", ["Embed", "EmbedStream", "GetModelInfo"])
async def test_an_unknown_model_is_not_found_and_the_error_names_the_served_ones(both, rpc_error, call):
    if call == "Embed":
        pending = both.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="bge-large"))
    elif call == "GetModelInfo":
        pending = both.stub.GetModelInfo(pb2.GetModelInfoRequest(model="bge-large"))
    else:

        async def requests():
            yield pb2.EmbedStreamRequest(request_id="x", texts=TEXTS, model="bge-large")

        async def drain():
            return [reply async for reply in both.stub.EmbedStream(requests())]

        pending = drain()
    error = await rpc_error(pending)
    assert (error.code, error.reason, error.domain) == (grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND", DOMAIN)
    assert (error.metadata["model"], error.metadata["models"]) == ("bge-large", "default,small")
    assert "default, small" in error.message


async def test_the_default_model_can_be_renamed(serve, rpc_error):
    settings = two_models(model_name="minilm")
    async with serve(settings) as running:
        reply = await running.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="minilm"))
        assert (reply.model, reply.dimension) == ("minilm", 384)
        assert (await running.stub.Embed(pb2.EmbedRequest(texts=TEXTS))).model == "minilm"
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="default")))
        assert error.reason == "MODEL_NOT_FOUND" and error.metadata["models"] == "minilm,small"


def test_extra_models_come_from_the_environment_and_inherit_what_they_do_not_set(monkeypatch):
    monkeypatch.setenv("RAGMESH_EMBEDDER_BACKEND", "hash")
    monkeypatch.setenv("RAGMESH_EMBEDDER_BATCH_SIZE", "8")
    monkeypatch.setenv(
        "RAGMESH_EMBEDDER_EXTRA_MODELS",
        json.dumps(
            [
                {"name": "small", "hash_dimension": 64, "max_queue_texts": 1024},
                {
                    "name": "api",
                    "backend": "openai",
                    "openai_model": "text-embedding-3-large",
                    "openai_api_key": "sk-x",
                },
            ]
        ),
    )
    settings = load(EmbedderSettings)
    small, api = (settings.for_model(spec) for spec in settings.extra_models)
    assert (small.model_name, small.backend, small.hash_dimension, small.batch_size, small.max_queue_texts) == (
        "small",
        "hash",
        64,
        8,
        1024,
    )
    assert (api.backend, api.openai_model, api.openai_api_key.get_secret_value(), api.batch_size) == (
        "openai",
        "text-embedding-3-large",
        "sk-x",
        8,
    )
    assert settings.max_queue_texts == 8192 and settings.hash_dimension == 384
    assert "sk-x" not in repr(settings)


@pytest.mark.parametrize(
    ("extra_models", "message"),
    [
        ('[{"name": "default"}]', "the name 'default' is the default model's name"),
        ('[{"name": "new"}, {"name": "new"}]', "the name 'new' is the name of an earlier entry"),
        ('[{"name": "new", "colour": "blue"}]', r"RAGMESH_EMBEDDER_EXTRA_MODELS\[0\].colour: Extra inputs"),
        ('[{"name": "New Model"}]', r"RAGMESH_EMBEDDER_EXTRA_MODELS\[0\].name: String should match pattern"),
        ('[{"hash_dimension": 64}]', r"RAGMESH_EMBEDDER_EXTRA_MODELS\[0\].name: Field required"),
        ('[{"name": "new", "backend": "tfidf"}]', r"RAGMESH_EMBEDDER_EXTRA_MODELS\[0\].backend: Input should be"),
        ('[{"name": "new", "hash_dimension": 2}]', r"EXTRA_MODELS\[0\].hash_dimension: Input should be greater"),
        ('{"name": "new"}', "RAGMESH_EMBEDDER_EXTRA_MODELS: Input should be a valid list"),
        ('[{"name": "new",', "RAGMESH_EMBEDDER_EXTRA_MODELS: not valid JSON"),
        (
            '[{"name": "new", "precision": "int8", "runtime": "torch"}]',
            "EXTRA_MODELS entry 'new': precision=int8 needs runtime=onnx",
        ),
        (
            '[{"name": "new", "max_queue_texts": 10}]',
            r"EXTRA_MODELS entry 'new': max_queue_texts \(10\) must be at least max_texts_per_request",
        ),
    ],
)
def test_bad_extra_models_stop_the_start_with_a_message_naming_the_entry(monkeypatch, extra_models, message):
    monkeypatch.setenv("RAGMESH_EMBEDDER_EXTRA_MODELS", extra_models)
    with pytest.raises(ConfigError, match=message):
        load(EmbedderSettings, backend="hash")


def test_a_settings_error_never_shows_a_secret():
    extra = [{"name": "api", "backend": "openai", "openai_api_key": "sk-very-secret", "max_queue_texts": 1}]
    with pytest.raises(ConfigError) as raised:
        load(EmbedderSettings, backend="hash", openai_api_key="sk-top-secret", extra_models=json.dumps(extra))
    assert "max_queue_texts (1)" in str(raised.value)
    assert "secret" not in str(raised.value)


def test_a_model_that_cannot_load_stops_the_start_naming_it(tmp_path):
    settings = load(
        EmbedderSettings,
        backend="hash",
        extra_models=json.dumps([{"name": "broken", "backend": "local", "model_path": str(tmp_path / "missing")}]),
    )
    with pytest.raises(ConfigError, match="EXTRA_MODELS entry 'broken' could not be loaded"):
        build_embedder(settings)


async def test_bulk_work_on_one_model_neither_blocks_nor_fills_the_queue_of_another(serve, until, gated, rpc_error):
    settings = two_models(max_texts_per_request=4, max_queue_texts=4)
    async with serve(settings, Embedder(gated, settings, {"small": HashBackend(64)})) as running:
        default = running.embedder.models["default"].batcher
        bulk = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["a", "b", "c", "d"])))
        await until(gated.entered.is_set, "the default model took the bulk request")
        # The default model's queue is full: it refuses more...
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["one more"])))
        assert (error.reason, error.metadata["model"]) == ("QUEUE_FULL", "default")
        # ...while the other model answers a query at once, its batcher untouched by the busy one.
        query = await running.stub.Embed(
            pb2.EmbedRequest(texts=["where do glaciers flow"], input_type=pb2.INPUT_TYPE_QUERY, model="small")
        )
        assert query.dimension == 64 and len(query.embeddings[0].dense) == 64
        assert not bulk.done() and gated.calls == [] and default.queue_depth == 4
        gated.gate.set()
        assert len((await bulk).embeddings) == 4


async def test_metrics_are_labelled_by_model_and_the_total_queue_stays_unlabelled(serve, until, gated):
    registry = setup_telemetry("embedder").registry

    def sample(name: str, model: str | None = None) -> float:
        return registry.get_sample_value(name, {"model": model} if model else {}) or 0.0

    settings = two_models()
    async with serve(settings, Embedder(gated, settings, {"small": HashBackend(64)})) as running:
        before = {m: sample("ragmesh_embedder_texts_total", m) for m in ("default", "small")}
        await running.stub.Embed(pb2.EmbedRequest(texts=["x", "y", "z"], model="small"))
        assert sample("ragmesh_embedder_texts_total", "small") == before["small"] + 3
        assert sample("ragmesh_embedder_texts_total", "default") == before["default"]
        assert sample("ragmesh_embedder_batch_size_count", "small") >= 1
        pending = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["a", "b"])))
        await until(gated.entered.is_set, "the default model is busy")
        # The HPA's metric is every model's backlog; the labelled gauge splits it.
        assert sample("ragmesh_embedder_model_queue_depth", "default") == 2
        assert sample("ragmesh_embedder_model_queue_depth", "small") == 0
        assert sample("ragmesh_embedder_queue_depth") == 2
        gated.gate.set()
        await pending
        assert sample("ragmesh_embedder_texts_total", "default") == before["default"] + 2


async def test_the_model_span_names_the_model(both):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer, both.embedder._tracer = both.embedder._tracer, provider.get_tracer("test")
    try:
        await both.stub.Embed(pb2.EmbedRequest(texts=TEXTS, model="small"))
        await both.stub.Embed(pb2.EmbedRequest(texts=TEXTS))
    finally:
        both.embedder._tracer = tracer
    spans = [s for s in exporter.get_finished_spans() if s.name == "embedder.model"]
    assert [(s.attributes[Attr.MODEL_NAME], s.attributes[Attr.MODEL]) for s in spans] == [
        ("small", "ragmesh/hash-64"),
        ("default", "ragmesh/hash-384"),
    ]
