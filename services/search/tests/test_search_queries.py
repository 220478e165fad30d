"""Search over real gRPC: documents ingested through the indexer, queried through the search service
(embedder with the hash backend, so keyword overlap decides similarity)."""

from __future__ import annotations

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="session")
MODES = [pb.SEARCH_MODE_HYBRID, pb.SEARCH_MODE_DENSE, pb.SEARCH_MODE_SPARSE]
DOCS = {
    # collection "default"
    ("default", "volcano"): (
        "Volcanoes",
        {"kind": "geo", "year": 2020},
        "Volcanoes erupt magma and lava. Lava flows cool into basalt rock near the crater.",
    ),
    ("default", "bread"): (
        "Bread",
        {"kind": "food", "year": 2021},
        "Bread dough needs flour, water, yeast and salt. Knead the dough and bake the loaf.",
    ),
    ("default", "comet"): (
        "Comets",
        {"kind": "space", "year": 2020},
        "Comets are icy bodies; near the sun a comet grows a glowing tail of gas and dust.",
    ),
    # collection "other"
    ("other", "lava-lamp"): (
        "Lava lamps",
        {"kind": "home", "year": 2022},
        "A lava lamp heats wax in liquid; blobs of lava-like wax rise and fall slowly.",
    ),
}


def struct(data: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(data)
    return s


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory(indexer={"chunk_tokens": 48})
    indexer = mesh.stub("indexer")
    documents = [
        indexer_pb.DocumentInput(collection=c, doc_id=d, title=t, metadata=struct(m), text=text)
        for (c, d), (t, m, text) in DOCS.items()
    ]
    # a long document with many chunks, all about lava, for grouping
    long = "\n\n".join(f"Lava section {i}: lava lava basalt magma flow number {i} " + "filler " * 30 for i in range(8))
    documents.append(indexer_pb.DocumentInput(collection="default", doc_id="lava-book", text=long))
    events = [e async for e in indexer.IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))]
    assert all(e.result.status == indexer_pb.INGEST_STATUS_INDEXED for e in events), events
    return mesh


@pytest.fixture
def search(mesh):
    return mesh.stub("search")


async def run(search, query: str, **kwargs) -> pb.SearchResponse:
    return await search.Search(pb.SearchRequest(query=query, **kwargs))


@pytest.mark.parametrize("mode", MODES, ids=["hybrid", "dense", "sparse"])
async def test_each_mode_finds_the_matching_document(search, mode):
    reply = await run(search, "yeast flour dough", mode=mode, top_k=3)
    assert reply.mode == mode and reply.query == "yeast flour dough"
    top = reply.results[0]
    assert (top.doc_id, top.title, top.collection, top.source) == ("bread", "Bread", "default", "text")
    assert top.metadata["kind"] == "food" and "dough" in top.text
    scores = [r.score for r in reply.results]
    assert scores == sorted(scores, reverse=True)


async def test_default_mode_is_hybrid_and_default_top_k_is_five(search):
    reply = await run(search, "lava")
    assert reply.mode == pb.SEARCH_MODE_HYBRID
    assert len(reply.results) == 5


async def test_filters_on_chunk_fields_and_metadata(search):
    reply = await run(search, "lava magma comet", filters=struct({"kind": "space"}), top_k=10)
    assert {r.doc_id for r in reply.results} == {"comet"}
    reply = await run(search, "lava magma comet bread", filters=struct({"year": 2020}), top_k=10)
    assert {r.doc_id for r in reply.results} == {"volcano", "comet"}
    reply = await run(search, "lava", filters=struct({"doc_id": ["volcano", "bread"]}), top_k=10)
    assert {r.doc_id for r in reply.results} <= {"volcano", "bread"} and reply.results
    reply = await run(search, "lava", filters=struct({"title": "Nothing like this"}))
    assert list(reply.results) == []


async def test_group_by_document_returns_distinct_documents(search):
    plain = await run(search, "lava basalt magma", top_k=4, mode=pb.SEARCH_MODE_SPARSE)
    assert len({r.doc_id for r in plain.results}) < 4  # the lava book fills the top
    grouped = await run(search, "lava basalt magma", top_k=4, mode=pb.SEARCH_MODE_SPARSE, group_by_document=True)
    doc_ids = [r.doc_id for r in grouped.results]
    assert len(doc_ids) == len(set(doc_ids)) and {"lava-book", "volcano"} <= set(doc_ids)


async def test_several_collections_are_merged_by_score(search):
    reply = await run(
        search, "lava wax lamp", collections=["default", "other", "default"], top_k=10, mode=pb.SEARCH_MODE_SPARSE
    )
    assert {r.collection for r in reply.results} == {"default", "other"}
    assert reply.results[0].doc_id == "lava-lamp"
    scores = [r.score for r in reply.results]
    assert scores == sorted(scores, reverse=True)
    assert len({(r.collection, r.chunk_id) for r in reply.results}) == len(reply.results)  # no duplicates


async def test_score_threshold_drops_weak_results(search):
    everything = await run(search, "comet tail", mode=pb.SEARCH_MODE_DENSE, top_k=20)
    cut = (everything.results[0].score + everything.results[-1].score) / 2
    kept = await run(search, "comet tail", mode=pb.SEARCH_MODE_DENSE, top_k=20, score_threshold=cut)
    assert 0 < len(kept.results) < len(everything.results)
    assert all(r.score >= cut for r in kept.results)


@pytest.mark.parametrize(
    ("request_kwargs", "code", "reason"),
    [
        ({"query": ""}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_EMPTY"),
        ({"query": "  \n "}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_EMPTY"),
        ({"query": "x" * 2001}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_TOO_LONG"),
        ({"query": "lava", "top_k": 101}, grpc.StatusCode.INVALID_ARGUMENT, "TOP_K_OUT_OF_RANGE"),
        ({"query": "lava", "top_k": -1}, grpc.StatusCode.INVALID_ARGUMENT, "TOP_K_OUT_OF_RANGE"),
        ({"query": "lava", "collections": ["Bad!"]}, grpc.StatusCode.INVALID_ARGUMENT, "COLLECTION_NAME_INVALID"),
        ({"query": "lava", "collections": ["default", "missing"]}, grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND"),
        (
            {"query": "lava", "filters": struct({"kind": {"nested": 1}})},
            grpc.StatusCode.INVALID_ARGUMENT,
            "FILTER_INVALID",
        ),
        ({"query": "lava", "filters": struct({"kind": None})}, grpc.StatusCode.INVALID_ARGUMENT, "FILTER_INVALID"),
        ({"query": "lava", "filters": struct({"kind": []})}, grpc.StatusCode.INVALID_ARGUMENT, "FILTER_INVALID"),
        ({"query": "lava", "filters": struct({"kind": [["a"]]})}, grpc.StatusCode.INVALID_ARGUMENT, "FILTER_INVALID"),
        ({"query": "lava", "filters": struct({"bad key!": 1})}, grpc.StatusCode.INVALID_ARGUMENT, "FILTER_INVALID"),
        ({"query": "lava", "filters": struct({"doc_id": 5})}, grpc.StatusCode.INVALID_ARGUMENT, "FILTER_INVALID"),
    ],
    ids=[
        "empty",
        "blank",
        "too-long",
        "top-k-high",
        "top-k-negative",
        "collection-name",
        "collection-missing",
        "filter-dict",
        "filter-null",
        "filter-empty-list",
        "filter-nested-list",
        "filter-key",
        "filter-type",
    ],
)
async def test_rejected_searches(search, rpc_error, request_kwargs, code, reason):
    err = await rpc_error(search.Search(pb.SearchRequest(**request_kwargs)))
    assert (err.code, err.reason, err.domain) == (code, reason, "search.ragmesh")


async def test_get_document_returns_the_whole_text_in_order(search):
    document = await search.GetDocument(pb.GetDocumentRequest(doc_id="lava-book"))
    assert document.collection == "default" and len(document.chunks) > 3
    assert [c.chunk_index for c in document.chunks] == list(range(len(document.chunks)))
    assert document.text.startswith("Lava section 0:") and document.text.rstrip().endswith("filler")
    assert [f"section {i}:" in document.text for i in range(8)] == [True] * 8
    assert document.text.index("section 3:") < document.text.index("section 4:")
    volcano = await search.GetDocument(pb.GetDocumentRequest(collection="default", doc_id="volcano"))
    assert (volcano.title, volcano.source, volcano.metadata["kind"]) == ("Volcanoes", "text", "geo")
    assert volcano.text == DOCS[("default", "volcano")][2] and len(volcano.content_hash) == 64


async def test_get_document_rejects(search, rpc_error):
    err = await rpc_error(search.GetDocument(pb.GetDocumentRequest(doc_id="nope")))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "DOCUMENT_NOT_FOUND")
    err = await rpc_error(search.GetDocument(pb.GetDocumentRequest(collection="missing", doc_id="volcano")))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND")
    err = await rpc_error(search.GetDocument(pb.GetDocumentRequest(collection="default")))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "DOCUMENT_ID_INVALID")
    err = await rpc_error(search.GetDocument(pb.GetDocumentRequest(collection="No!", doc_id="x")))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "COLLECTION_NAME_INVALID")


async def test_list_collections_counts_documents_and_chunks(mesh, search):
    reply = await search.ListCollections(pb.ListCollectionsRequest())
    by_name = {c.name: c for c in reply.collections}
    assert [c.name for c in reply.collections] == sorted(by_name) and {"default", "other"} <= set(by_name)
    assert by_name["default"].documents == 4 and by_name["other"].documents == 1
    assert by_name["default"].chunks == mesh.store.stats("default").chunks > 4
