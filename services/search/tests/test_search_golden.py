"""Golden sets and evaluations over real gRPC: documents ingested through the indexer, a golden set stored and
scored through the search service (hash embedder: keyword overlap decides similarity; BM25 is the real one)."""

from __future__ import annotations

import math

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_search import golden as golden_module
from ragmesh_search.config import SearchSettings
from ragmesh_search.metrics import QualityMetrics
from ragmesh_search.server import create_server

pytestmark = pytest.mark.asyncio(loop_scope="session")
COLLECTION = "quality"
DOCS = {
    "volcano": "Volcanoes erupt magma and lava. Lava flows cool into basalt rock near the crater.",
    "bread": "Bread dough needs flour, water, yeast and salt. Knead the dough and bake the loaf.",
    "comet": "Comets are icy bodies; near the sun a comet grows a glowing tail of gas and dust.",
    "violin": "A violin has four strings tuned in fifths and is played with a bow of horsehair.",
}
# Each query's words are in its relevant document only, so BM25 ranks it first.
QUERIES = [
    ("q-bread", "yeast flour dough", {"bread": 2}),
    ("q-comet", "comet tail", {"comet": 1}),
    ("q-lava", "lava basalt crater", {"volcano": 1, "bread": 0}),
]


def golden(queries=QUERIES) -> list[pb.GoldenQuery]:
    return [pb.GoldenQuery(query_id=q, text=t, relevant=r) for q, t, r in queries]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    indexer = mesh.stub("indexer")
    documents = [indexer_pb.DocumentInput(collection=COLLECTION, doc_id=d, text=t) for d, t in DOCS.items()]
    events = [e async for e in indexer.IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))]
    assert all(e.result.status == indexer_pb.INGEST_STATUS_INDEXED for e in events), events
    return mesh


@pytest.fixture
def search(mesh):
    return mesh.stub("search")


def gauge(collection: str, mode: str, metric: str) -> float | None:
    """The search service's ragmesh_collection_quality sample, as its /metrics would show it (None: absent)."""
    for family in setup_telemetry("search").registry.collect():
        if family.name == "ragmesh_collection_quality":
            for sample in family.samples:
                if sample.labels == {"collection": collection, "mode": mode, "metric": metric}:
                    return sample.value
    return None


async def test_a_golden_set_is_stored_read_back_and_deleted(search, rpc_error):
    stored = await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    assert (stored.collection, stored.queries, stored.judgments) == (COLLECTION, 3, 4)
    assert len(stored.golden_set_id) == 16 and stored.updated_at
    read = await search.GetGoldenSet(pb.GetGoldenSetRequest(collection=COLLECTION))
    assert [(q.query_id, q.text, dict(q.relevant)) for q in read.queries] == QUERIES
    assert read.golden_set_id == stored.golden_set_id

    deleted = await search.DeleteGoldenSet(pb.DeleteGoldenSetRequest(collection=COLLECTION))
    assert (deleted.collection, deleted.deleted_queries) == (COLLECTION, 3)
    for call in (
        search.GetGoldenSet(pb.GetGoldenSetRequest(collection=COLLECTION)),
        search.DeleteGoldenSet(pb.DeleteGoldenSetRequest(collection=COLLECTION)),
    ):
        err = await rpc_error(call)
        assert (err.code.name, err.reason) == ("NOT_FOUND", "GOLDEN_SET_NOT_FOUND")
    err = await rpc_error(search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=COLLECTION)))
    assert (err.code.name, err.reason) == ("NOT_FOUND", "GOLDEN_SET_NOT_FOUND")


async def test_evaluation_scores_the_index_keeps_a_history_and_exports_gauges(search):
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    before = await search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION))
    reply = await search.EvaluateCollection(
        pb.EvaluateCollectionRequest(collection=COLLECTION, modes=[pb.SEARCH_MODE_SPARSE, pb.SEARCH_MODE_HYBRID])
    )
    sparse, hybrid = reply.evaluations
    assert (sparse.mode, hybrid.mode) == (pb.SEARCH_MODE_SPARSE, pb.SEARCH_MODE_HYBRID)
    # BM25 puts each query's one relevant document first: perfect scores.
    assert (sparse.ndcg_at_10, sparse.recall_at_10, sparse.mrr_at_10) == (1.0, 1.0, 1.0)
    assert sparse.queries == 3 and sparse.fusion == pb.FUSION_UNSPECIFIED and sparse.model == ""
    assert (sparse.documents, sparse.chunks) == (4, 4)
    assert hybrid.fusion == pb.FUSION_ADAPTIVE and hybrid.model  # the embedder's model embedded the queries
    assert 0.0 <= hybrid.ndcg_at_10 <= 1.0 and hybrid.golden_set_id == sparse.golden_set_id

    default = (await search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=COLLECTION))).evaluations
    assert [e.mode for e in default] == [pb.SEARCH_MODE_HYBRID]  # no modes: the service's default mode

    history = (await search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION))).evaluations
    assert len(history) == len(before.evaluations) + 3
    assert list(history[-3:]) == [sparse, hybrid, default[0]]  # newest last, as returned
    only_sparse = await search.ListEvaluations(
        pb.ListEvaluationsRequest(collection=COLLECTION, mode=pb.SEARCH_MODE_SPARSE)
    )
    assert [e.mode for e in only_sparse.evaluations] == [pb.SEARCH_MODE_SPARSE] * len(only_sparse.evaluations)
    newest = await search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION, limit=1))
    assert list(newest.evaluations) == [default[0]]

    assert gauge(COLLECTION, "sparse", "ndcg_at_10") == 1.0
    assert gauge(COLLECTION, "hybrid", "mrr_at_10") == pytest.approx(default[0].mrr_at_10)


async def test_a_worse_ranking_scores_lower(search):
    # "lava" also names the bread document as relevant (grade 1): it cannot be found by those words.
    queries = [("q-lava", "lava basalt crater", {"volcano": 1, "bread": 1})]
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden(queries)))
    (e,) = (
        await search.EvaluateCollection(
            pb.EvaluateCollectionRequest(collection=COLLECTION, modes=[pb.SEARCH_MODE_SPARSE])
        )
    ).evaluations
    assert e.recall_at_10 == 0.5 and e.mrr_at_10 == 1.0
    assert e.ndcg_at_10 == pytest.approx(1.0 / (1.0 + 1.0 / math.log2(3)))


async def test_the_history_keeps_the_newest(search, monkeypatch):
    monkeypatch.setattr(golden_module, "HISTORY_SIZE", 3)
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    last = None
    for _ in range(4):
        last = (
            await search.EvaluateCollection(
                pb.EvaluateCollectionRequest(collection=COLLECTION, modes=[pb.SEARCH_MODE_DENSE])
            )
        ).evaluations[0]
    history = (await search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION))).evaluations
    assert len(history) == 3 and history[-1] == last


@pytest.mark.parametrize(
    ("queries", "reason", "field"),
    [
        ([], "GOLDEN_SET_EMPTY", "queries"),
        ([("q", "words", {"bread": 1})] * 2, "GOLDEN_QUERY_DUPLICATE", "queries[1].query_id"),
        ([("", "words", {"bread": 1})], "GOLDEN_QUERY_INVALID", "queries[0].query_id"),
        ([("q" * 257, "words", {"bread": 1})], "GOLDEN_QUERY_INVALID", "queries[0].query_id"),
        ([("q", "   ", {"bread": 1})], "GOLDEN_QUERY_INVALID", "queries[0].text"),
        ([("q", "x" * 2001, {"bread": 1})], "GOLDEN_QUERY_INVALID", "queries[0].text"),
        ([("q", "words", {})], "GOLDEN_QUERY_INVALID", "queries[0].relevant"),
        ([("q", "words", {"bread": 0})], "GOLDEN_QUERY_INVALID", "queries[0].relevant"),
        ([("q", "words", {"bread": 11})], "GOLDEN_GRADE_INVALID", "queries[0].relevant"),
        ([("q", "words", {"bread": -1})], "GOLDEN_GRADE_INVALID", "queries[0].relevant"),
        ([("q", "words", {" bread": 1})], "DOCUMENT_ID_INVALID", "queries[0].relevant"),
        ([(f"q{i}", "words", {"bread": 1}) for i in range(1001)], "GOLDEN_SET_TOO_LARGE", "queries"),
        ([("q", "words", {f"d{i}": 1 for i in range(1001)})], "GOLDEN_SET_TOO_LARGE", "queries[0].relevant"),
        ([(f"q{i}", "words", {f"d{j}": 1 for j in range(1000)}) for i in range(51)], "GOLDEN_SET_TOO_LARGE", "queries"),
    ],
    ids=[
        "empty",
        "duplicate",
        "no-id",
        "long-id",
        "blank-text",
        "long-text",
        "no-judgment",
        "nothing-relevant",
        "grade-above-10",
        "negative-grade",
        "bad-doc-id",
        "too-many-queries",
        "too-many-judgments",
        "too-many-in-all",
    ],
)
async def test_malformed_golden_sets_are_refused_and_the_stored_one_kept(search, rpc_error, queries, reason, field):
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    err = await rpc_error(search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden(queries))))
    assert (err.code.name, err.reason) == ("INVALID_ARGUMENT", reason), err
    assert [v.field for v in err.field_violations] == [field]
    kept = await search.GetGoldenSet(pb.GetGoldenSetRequest(collection=COLLECTION))
    assert len(kept.queries) == len(QUERIES)


async def test_judgments_that_point_at_nothing_are_refused(search, rpc_error):
    queries = [("q1", "yeast", {"bread": 1}), ("q2", "comet", {"comet": 1, "no-such-doc": 2, "unjudged": 0})]
    err = await rpc_error(search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden(queries))))
    assert (err.code.name, err.reason) == ("NOT_FOUND", "GOLDEN_DOCUMENT_NOT_FOUND")
    assert "'no-such-doc' (query 'q2')" in err.message and err.metadata["missing"] == "1"


async def test_unknown_collections_and_modes_are_refused(search, rpc_error):
    for call in (
        search.SetGoldenSet(pb.SetGoldenSetRequest(collection="nowhere", queries=golden())),
        search.GetGoldenSet(pb.GetGoldenSetRequest(collection="nowhere")),
        search.EvaluateCollection(pb.EvaluateCollectionRequest(collection="nowhere")),
        search.ListEvaluations(pb.ListEvaluationsRequest(collection="nowhere")),
    ):
        err = await rpc_error(call)
        assert (err.code.name, err.reason) == ("NOT_FOUND", "COLLECTION_NOT_FOUND")
    err = await rpc_error(search.SetGoldenSet(pb.SetGoldenSetRequest(collection="Bad Name", queries=golden())))
    assert err.reason == "COLLECTION_NAME_INVALID"
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    err = await rpc_error(search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=COLLECTION, modes=[42])))
    assert (err.reason, [v.field for v in err.field_violations]) == ("MODE_INVALID", ["modes[0]"])
    err = await rpc_error(search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION, mode=42)))
    assert (err.reason, [v.field for v in err.field_violations]) == ("MODE_INVALID", ["mode"])
    err = await rpc_error(search.ListEvaluations(pb.ListEvaluationsRequest(collection=COLLECTION, limit=1001)))
    assert err.reason == "LIMIT_OUT_OF_RANGE"


async def test_the_golden_set_goes_with_its_collection(mesh, search, rpc_error):
    indexer = mesh.stub("indexer")
    document = indexer_pb.DocumentInput(collection="brief", doc_id="only", text="Short lived collection of tides.")
    await indexer.IngestDocument(indexer_pb.IngestDocumentRequest(document=document))
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection="brief", queries=golden([("q", "tides", {"only": 1})])))
    await search.EvaluateCollection(pb.EvaluateCollectionRequest(collection="brief"))
    await indexer.DeleteCollection(indexer_pb.DeleteCollectionRequest(name="brief"))
    await indexer.IngestDocument(indexer_pb.IngestDocumentRequest(document=document))  # the name again: a new one
    err = await rpc_error(search.GetGoldenSet(pb.GetGoldenSetRequest(collection="brief")))
    assert err.reason == "GOLDEN_SET_NOT_FOUND"
    assert not (await search.ListEvaluations(pb.ListEvaluationsRequest(collection="brief"))).evaluations


async def test_a_restarted_search_service_exports_the_stored_scores(mesh, search):
    await search.SetGoldenSet(pb.SetGoldenSetRequest(collection=COLLECTION, queries=golden()))
    (e,) = (
        await search.EvaluateCollection(
            pb.EvaluateCollectionRequest(collection=COLLECTION, modes=[pb.SEARCH_MODE_KEYWORD])
        )
    ).evaluations
    setup_telemetry("search").metrics(QualityMetrics).quality.clear()  # as in a new process
    assert gauge(COLLECTION, "keyword", "recall_at_10") is None
    settings = SearchSettings(host="127.0.0.1", port=0, embedder_addr=mesh.addrs["embedder"])
    service = await create_server(settings, store=mesh.store)
    try:
        assert gauge(COLLECTION, "keyword", "recall_at_10") == pytest.approx(e.recall_at_10)
    finally:
        await service.stop(0)
