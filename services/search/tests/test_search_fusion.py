"""Fusion choices, presets and 0..1 scores over real gRPC (hash embedder: keyword overlap decides similarity)."""

from __future__ import annotations

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="session")
DOCS = {
    "glacier": "Glaciers are rivers of ice that carve valleys as they move downhill.",
    "desert": "Deserts receive little rain; dunes of sand shift with the wind.",
    "reef": "Coral reefs grow in warm shallow seas and shelter many fish.",
    "ice-cream": "Ice cream melts quickly in the sun, so eat it before it drips.",
    "river": "Rivers carry water and sediment from mountains to the sea.",
}
ALL_WAYS = [
    (pb.SEARCH_MODE_HYBRID, pb.FUSION_RRF),
    (pb.SEARCH_MODE_HYBRID, pb.FUSION_DBSF),
    (pb.SEARCH_MODE_HYBRID, pb.FUSION_RELATIVE_SCORE),
    (pb.SEARCH_MODE_HYBRID, pb.FUSION_ADAPTIVE),
    (pb.SEARCH_MODE_DENSE, pb.FUSION_UNSPECIFIED),
    (pb.SEARCH_MODE_SPARSE, pb.FUSION_UNSPECIFIED),
    (pb.SEARCH_MODE_SEMANTIC, pb.FUSION_UNSPECIFIED),
    (pb.SEARCH_MODE_KEYWORD, pb.FUSION_UNSPECIFIED),
]


async def _ingest(mesh) -> None:
    documents = [indexer_pb.DocumentInput(collection="default", doc_id=d, text=t) for d, t in DOCS.items()]
    events = [
        e async for e in mesh.stub("indexer").IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))
    ]
    assert all(e.result.status == indexer_pb.INGEST_STATUS_INDEXED for e in events), events


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def search(mesh_factory):
    mesh = await mesh_factory()
    await _ingest(mesh)
    return mesh.stub("search")


@pytest.mark.parametrize(("mode", "fusion"), ALL_WAYS, ids=lambda v: pb.SearchMode.Name(v) if v > 0 else str(v))
async def test_every_way_finds_the_document_with_scores_between_0_and_1(search, mode, fusion):
    reply = await search.Search(
        pb.SearchRequest(query="glaciers carve valleys of ice", top_k=5, mode=mode, fusion=fusion)
    )
    assert reply.results[0].doc_id == "glacier"
    scores = [r.score for r in reply.results]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    assert reply.mode == mode


async def test_the_response_names_the_fusion_used(search):
    dbsf = await search.Search(pb.SearchRequest(query="sand dunes", mode=pb.SEARCH_MODE_HYBRID, fusion=pb.FUSION_DBSF))
    assert dbsf.fusion == pb.FUSION_DBSF
    default = await search.Search(pb.SearchRequest(query="sand dunes"))
    assert (default.mode, default.fusion) == (pb.SEARCH_MODE_HYBRID, pb.FUSION_ADAPTIVE)
    for preset in (pb.SEARCH_MODE_SEMANTIC, pb.SEARCH_MODE_KEYWORD):
        assert (await search.Search(pb.SearchRequest(query="sand dunes", mode=preset))).fusion == pb.FUSION_RRF
    dense = await search.Search(pb.SearchRequest(query="sand dunes", mode=pb.SEARCH_MODE_DENSE))
    assert dense.fusion == pb.FUSION_UNSPECIFIED


@pytest.mark.parametrize("mode", [pb.SEARCH_MODE_HYBRID, pb.SEARCH_MODE_SEMANTIC, pb.SEARCH_MODE_KEYWORD])
async def test_a_chunk_first_in_both_lists_scores_1_under_rrf(search, mode):
    reply = await search.Search(pb.SearchRequest(query=DOCS["reef"], mode=mode, fusion=pb.FUSION_RRF))
    assert reply.results[0].doc_id == "reef"
    assert reply.results[0].score == pytest.approx(1.0, abs=1e-5)
    assert reply.results[1].score < 1.0


async def test_rrf_k_sets_how_fast_fused_scores_fall_with_rank(search):
    def request(k: int) -> pb.SearchRequest:
        return pb.SearchRequest(query="ice rivers sea", top_k=5, fusion=pb.FUSION_RRF, rrf_k=k)

    steep, flat = await search.Search(request(1)), await search.Search(request(1000))
    assert [r.doc_id for r in steep.results][:1] == [r.doc_id for r in flat.results][:1]
    assert steep.results[-1].score < flat.results[-1].score


async def test_rrf_k_out_of_range_is_rejected(search, rpc_error):
    for k in (0, -1, 10_001):
        err = await rpc_error(search.Search(pb.SearchRequest(query="ice", rrf_k=k)))
        assert (err.code.name, err.reason) == ("INVALID_ARGUMENT", "RRF_K_OUT_OF_RANGE")


async def test_hybrid_order_is_the_same_on_every_call(search):
    request = pb.SearchRequest(query="water", top_k=5, mode=pb.SEARCH_MODE_HYBRID)
    orders = {tuple(r.doc_id for r in (await search.Search(request)).results) for _ in range(5)}
    assert len(orders) == 1


async def test_the_service_default_fusion_applies_when_a_request_names_none(mesh_factory):
    mesh = await mesh_factory(search={"default_fusion": "dbsf"})
    await _ingest(mesh)
    reply = await mesh.stub("search").Search(pb.SearchRequest(query="coral fish"))
    assert reply.fusion == pb.FUSION_DBSF and reply.results[0].doc_id == "reef"


async def test_a_collection_default_fusion_is_stored_and_used(mesh_factory, rpc_error):
    mesh = await mesh_factory()
    indexer, search = mesh.stub("indexer"), mesh.stub("search")
    created = await indexer.CreateCollection(
        indexer_pb.CreateCollectionRequest(name="tuned", default_fusion=pb.FUSION_DBSF, default_rrf_k=20)
    )
    assert (created.created, created.default_fusion, created.default_rrf_k) == (True, pb.FUSION_DBSF, 20)
    again = await indexer.CreateCollection(indexer_pb.CreateCollectionRequest(name="tuned"))
    assert (again.created, again.default_fusion, again.default_rrf_k) == (False, pb.FUSION_DBSF, 20)
    document = indexer_pb.DocumentInput(collection="tuned", doc_id="reef", text=DOCS["reef"])
    await indexer.IngestDocument(indexer_pb.IngestDocumentRequest(document=document))

    default = await search.Search(pb.SearchRequest(query="coral", collections=["tuned"]))
    assert default.fusion == pb.FUSION_DBSF
    chosen = await search.Search(pb.SearchRequest(query="coral", collections=["tuned"], fusion=pb.FUSION_RRF))
    assert chosen.fusion == pb.FUSION_RRF

    err = await rpc_error(indexer.CreateCollection(indexer_pb.CreateCollectionRequest(name="tuned", default_rrf_k=0)))
    assert (err.code.name, err.reason) == ("INVALID_ARGUMENT", "RRF_K_OUT_OF_RANGE")


async def test_relative_score_fusion_gives_the_top_of_both_lists_1(search):
    request = pb.SearchRequest(query=DOCS["ice-cream"], top_k=5, fusion=pb.FUSION_RELATIVE_SCORE)
    reply = await search.Search(request)
    assert reply.results[0].doc_id == "ice-cream"
    assert reply.results[0].score == pytest.approx(1.0, abs=1e-5)  # top of both lists: 0.75 + 0.25
    assert all(r.score < 1.0 for r in reply.results[1:])
