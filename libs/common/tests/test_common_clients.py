"""Which calls a client retries is the contract's to say (each RPC's idempotency_level in protos/), not a list
kept by each caller."""

from __future__ import annotations

import pytest
from ragmesh.answer.v1 import answer_service_pb2_grpc as answer_grpc
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as indexer_grpc
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc
from ragmesh_common.clients import ServiceClient


@pytest.fixture
async def client():
    made = []

    def make(stub_cls, **kwargs) -> ServiceClient:
        made.append(ServiceClient("svc", "127.0.0.1:9", stub_cls, timeout=1, **kwargs))
        return made[-1]

    yield make
    for c in made:
        await c.close()


async def test_reads_and_idempotent_writes_are_retried_and_the_rest_are_not(client):
    indexer = client(indexer_grpc.IndexerServiceStub).idempotent
    assert {"IngestDocuments", "DeleteDocument", "DeleteCollection", "GetJob", "CancelJob"} <= indexer
    assert not {"CreateJob", "SyncDatasources", "ReindexCollection", "RollbackCollection"} & indexer
    search = client(search_grpc.SearchServiceStub).idempotent
    assert {"Search", "GetDocument", "SetGoldenSet"} <= search and "EvaluateCollection" not in search
    answer = client(answer_grpc.AnswerServiceStub).idempotent
    assert answer == {"GetSession", "DeleteSession"}  # Ask stores a turn; AskStream is a stream


async def test_calls_that_stream_their_requests_are_never_retried(client):
    assert client(embedder_grpc.EmbedderServiceStub).idempotent == {"Embed", "GetModelInfo"}


async def test_a_caller_may_add_a_method_it_uses_idempotently(client):
    search = client(search_grpc.SearchServiceStub, idempotent_here=("EvaluateCollection",))
    assert "EvaluateCollection" in search.idempotent
