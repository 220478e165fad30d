"""Every reject path, as a client sees it: the gRPC code, one ErrorInfo (reason, domain embedder.ragmesh)
and, for bad fields, a BadRequest field violation."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh_common.config import ConfigError, load
from ragmesh_common.tokens import packed_ids
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder, build_embedder

DOMAIN = "embedder.ragmesh"


@pytest.mark.parametrize(
    ("texts", "reason", "field"),
    [
        ([], "TEXTS_EMPTY", "texts"),
        (["ok", "   \n"], "TEXT_EMPTY", "texts[1]"),
        (["a", "b", "c", "d", "e"], "TOO_MANY_TEXTS", "texts"),
        (["ok", "x" * 51], "TEXT_TOO_LONG", "texts[1]"),
    ],
)
async def test_bad_texts_are_rejected(hashed, rpc_error, texts, reason, field):
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=texts)))
    assert (error.code, error.reason, error.domain) == (grpc.StatusCode.INVALID_ARGUMENT, reason, DOMAIN)
    assert [violation.field for violation in error.field_violations] == [field]


async def test_a_blank_text_names_its_index(hashed, rpc_error):
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=["ok", "fine", ""])))
    assert error.reason == "TEXT_EMPTY" and error.metadata["index"] == "2"


@pytest.mark.parametrize("kinds", [[pb2.VECTOR_KIND_UNSPECIFIED], [pb2.VECTOR_KIND_DENSE, 9]])
async def test_an_invalid_vector_kind_is_rejected(hashed, rpc_error, kinds):
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=["ok"], kinds=kinds)))
    assert (error.code, error.reason, error.domain) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "VECTOR_KIND_INVALID",
        DOMAIN,
    )
    assert [violation.field for violation in error.field_violations] == [f"kinds[{len(kinds) - 1}]"]


async def test_an_unknown_input_type_is_rejected(hashed, rpc_error):
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=["ok"], input_type=7)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INPUT_TYPE_INVALID")


async def test_an_unknown_dense_format_is_rejected(hashed, rpc_error):
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=["ok"], dense_format=9)))
    assert (error.code, error.reason, error.domain) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "DENSE_FORMAT_INVALID",
        DOMAIN,
    )
    assert [violation.field for violation in error.field_violations] == ["dense_format"]


async def test_a_bad_request_ends_the_stream_with_its_error(hashed, rpc_error):
    async def requests():
        yield pb2.EmbedStreamRequest(request_id="good", texts=["fine"])
        yield pb2.EmbedStreamRequest(request_id="bad", texts=["fine", " "])

    async def drain():
        return [reply async for reply in hashed.stub.EmbedStream(requests())]

    error = await rpc_error(drain())
    assert (error.code, error.reason, error.domain) == (grpc.StatusCode.INVALID_ARGUMENT, "TEXT_EMPTY", DOMAIN)


async def test_a_full_queue_answers_resource_exhausted_then_recovers(serve, rpc_error, until, gated):
    settings = EmbedderSettings(port=0, backend="hash", max_texts_per_request=4, max_queue_texts=4)
    async with serve(settings, Embedder(gated, settings)) as running:
        first = asyncio.ensure_future(running.stub.Embed(pb2.EmbedRequest(texts=["a", "b", "c", "d"])))
        await until(gated.entered.is_set, "the worker took the first request")
        error = await rpc_error(running.stub.Embed(pb2.EmbedRequest(texts=["one more"])))
        assert (error.code, error.reason, error.domain) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "QUEUE_FULL", DOMAIN)
        assert error.metadata["max_queue_texts"] == "4"
        assert error.retry_after == 1.0  # google.rpc.RetryInfo: the gateway turns it into Retry-After
        gated.gate.set()
        assert len((await first).embeddings) == 4
        assert len((await running.stub.Embed(pb2.EmbedRequest(texts=["one more"]))).embeddings) == 1


def test_a_queue_smaller_than_one_request_is_a_configuration_error():
    with pytest.raises(ConfigError, match="max_queue_texts"):
        load(EmbedderSettings, max_texts_per_request=100, max_queue_texts=10)


def test_settings_come_from_prefixed_environment_variables(monkeypatch):
    monkeypatch.setenv("RAGMESH_EMBEDDER_BACKEND", "hash")
    monkeypatch.setenv("RAGMESH_EMBEDDER_BATCH_SIZE", "8")
    monkeypatch.setenv("RAGMESH_EMBEDDER_OPENAI_API_KEY", "sk-secret")
    settings = load(EmbedderSettings)
    assert (settings.backend, settings.batch_size, settings.port) == ("hash", 8, 50052)
    assert "sk-secret" not in repr(settings)
    monkeypatch.setenv("RAGMESH_EMBEDDER_BACKEND", "tfidf")
    with pytest.raises(ConfigError, match="RAGMESH_EMBEDDER_BACKEND"):
        load(EmbedderSettings)


def _tokens(ids: list[list[int]], *, tokenizer: str = "", lengths: list[int] | None = None) -> pb2.TokenIds:
    return pb2.TokenIds(
        tokenizer=tokenizer, ids=packed_ids(ids), lengths=[len(i) for i in ids] if lengths is None else lengths
    )


@pytest.mark.parametrize(
    ("texts", "ids", "lengths", "field"),
    [
        (["one", "two"], [[101, 2028, 102]], None, "token_ids.lengths"),  # one length for two texts
        (["one"], [[101, 2028, 102]], [4], "token_ids.ids"),  # 12 bytes, lengths say 16
        (["one", "two"], [[101, 2028, 102], []], None, "token_ids.lengths[1]"),  # no tokens for a text
        (["long"], [[101] + [2146] * 300 + [102]], None, "token_ids.lengths[0]"),  # past the 256-token window
        (["one"], [[101, 30522, 102]], None, "token_ids.ids"),  # past the 30,522-token vocabulary
        (["one"], [[101, -5, 102]], None, "token_ids.ids"),
    ],
)
async def test_token_ids_that_do_not_fit_the_texts_are_rejected(local, rpc_error, texts, ids, lengths, field):
    tokenizer = (await local.stub.GetModelInfo(pb2.GetModelInfoRequest())).tokenizer
    error = await rpc_error(
        local.stub.Embed(pb2.EmbedRequest(texts=texts, token_ids=_tokens(ids, tokenizer=tokenizer, lengths=lengths)))
    )
    assert (error.code, error.reason, error.domain) == (grpc.StatusCode.INVALID_ARGUMENT, "TOKEN_IDS_INVALID", DOMAIN)
    assert [violation.field for violation in error.field_violations] == [field]


async def test_token_ids_of_another_tokenizer_are_rejected(local, rpc_error):
    error = await rpc_error(
        local.stub.Embed(
            pb2.EmbedRequest(texts=["one"], token_ids=_tokens([[101, 2028, 102]], tokenizer="0123456789abcdef"))
        )
    )
    assert (error.code, error.reason, error.domain) == (grpc.StatusCode.INVALID_ARGUMENT, "TOKENIZER_MISMATCH", DOMAIN)
    assert error.metadata["tokenizer"] == "0123456789abcdef"
    assert error.metadata["model_tokenizer"] == (await local.stub.GetModelInfo(pb2.GetModelInfoRequest())).tokenizer


async def test_a_model_without_a_tokenizer_takes_no_token_ids(hashed, rpc_error):
    assert (await hashed.stub.GetModelInfo(pb2.GetModelInfoRequest())).tokenizer == ""
    error = await rpc_error(hashed.stub.Embed(pb2.EmbedRequest(texts=["one"], token_ids=_tokens([[1, 2, 3]]))))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TOKENIZER_MISMATCH")
    assert "takes texts only" in error.message


@pytest.mark.parametrize("value", ["on", "off"])
def test_a_removed_setting_still_set_starts_the_embedder_and_says_it_is_not_read(monkeypatch, caplog, value):
    """RAGMESH_EMBEDDER_MODEL_PROCESSES is gone (docs/decisions/embedder-model-processes.md): a deployment that still
    sets it starts as before, the model in the embedder's threads, with a warning that names the variable."""
    monkeypatch.setenv("RAGMESH_EMBEDDER_MODEL_PROCESSES", value)
    embedder = build_embedder(load(EmbedderSettings, port=0, backend="hash"))
    try:
        assert embedder.batcher.runners == 1
    finally:
        embedder.close()
    assert "RAGMESH_EMBEDDER_MODEL_PROCESSES is set but no longer read" in caplog.text
