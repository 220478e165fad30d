"""Adaptive fusion on the real embedded store: it follows the informative list when the other one is noise, its
scores are 0..1 in a stable order, and pseudo-relevance feedback costs one more store query and no second Embed
call (the real embedder over gRPC, hash backend)."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
import pytest_asyncio
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh_common.clients import ServiceClient
from ragmesh_search.fusion import adaptive_fusion, rocchio
from ragmesh_search.service import Searcher, SearchIn
from ragmesh_store import ChunkPoint, EdgeStore, Query, Sparse

from tests.support.threads import ThreadNotingStore

DIM = 64
CHUNKS = 300
VOCAB = 2000
rng = random.Random(13)


def unit(v: list[float]) -> list[float]:
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


def noisy(center: list[float], spread: float) -> list[float]:
    return unit([c + rng.gauss(0, spread) for c in center])


TOPIC = unit([rng.gauss(0, 1) for _ in range(DIM)])
TOPIC_TERMS = [1, 2, 3]  # the words of the topic; the 20 topical chunks hold them, the others hold random words


def chunk(i: int) -> ChunkPoint:
    topical = i < 20
    dense = noisy(TOPIC, (0.6 + 0.05 * i) / DIM**0.5) if topical else unit([rng.gauss(0, 1) for _ in range(DIM)])
    terms = sorted(set((TOPIC_TERMS[: 1 + i % 3] if topical else []) + rng.sample(range(10, VOCAB), 8)))
    return ChunkPoint(
        f"00000000-0000-4000-8000-{i:012d}",
        dense,
        Sparse(terms, [1.0] * len(terms)),
        {"doc_id": f"d{i:03d}", "chunk_index": 0, "text": f"chunk {i}"},
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    opened = EdgeStore(tmp_path_factory.mktemp("adaptive"), DIM)
    opened.ensure_collection("c")
    opened.upsert("c", [chunk(i) for i in range(CHUNKS)])
    yield opened
    opened.close()


def fused(store, dense, sparse, limit=10):
    query = Query(mode="hybrid", limit=limit, dense=dense, sparse=sparse, prefetch_limit=50)
    hits, weights = adaptive_fusion(store.hybrid_evidence("c", query), sparse, limit)
    payloads = store.payloads("c", [h.id for h in hits])
    return [payloads[h.id]["doc_id"] for h in hits], hits, weights


def single(store, mode, dense=None, sparse=None, limit=10):
    return [h.payload["doc_id"] for h in store.query("c", Query(mode=mode, limit=limit, dense=dense, sparse=sparse))]


def test_with_a_noise_lexical_side_adaptive_fusion_keeps_the_dense_ranking(store):
    noise = Sparse(rng.sample(range(10, VOCAB), 3), [1.0] * 3)  # words unrelated to the topic
    ranked, hits, weights = fused(store, TOPIC, noise)
    dense = single(store, "dense", dense=TOPIC)
    assert ranked[:5] == dense[:5] and len(set(ranked) & set(dense)) >= 9
    assert weights.dense > 0.75  # the noise list's best match covers a third of the query at most


def test_with_a_noise_dense_side_adaptive_fusion_keeps_the_lexical_ranking(store):
    lexical = Sparse(TOPIC_TERMS, [1.0] * 3)
    ranked, _, weights = fused(store, unit([rng.gauss(0, 1) for _ in range(DIM)]), lexical)
    sparse = single(store, "sparse", sparse=lexical)
    assert set(ranked[:6]) == set(sparse[:6])  # the 6 chunks holding all three topic words
    assert weights.sparse > weights.dense


def test_when_both_lists_agree_both_count_and_scores_stay_between_0_and_1(store):
    ranked, hits, weights = fused(store, TOPIC, Sparse(TOPIC_TERMS, [1.0] * 3), limit=50)
    assert 0.3 < weights.dense < 0.7
    scores = [h.score for h in hits]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)
    assert len(set(ranked[:20]) & {f"d{i:03d}" for i in range(20)}) >= 18  # the topical chunks first
    again = [fused(store, TOPIC, Sparse(TOPIC_TERMS, [1.0] * 3), limit=50)[0] for _ in range(3)]
    assert all(order == ranked for order in again)


def test_a_query_whose_words_are_in_no_chunk_leaves_the_dense_ranking_alone(store):
    ranked, _, weights = fused(store, TOPIC, Sparse([VOCAB + 1, VOCAB + 2], [1.0, 1.0]))
    assert weights.sparse == 0.0 and ranked == single(store, "dense", dense=TOPIC)


def test_rocchio_moves_the_query_towards_the_feedback():
    moved = rocchio([1.0, 0.0], [[0.0, 2.0]], alpha=1.0, beta=0.5)
    assert moved == pytest.approx([1.0, 0.5])
    assert rocchio([3.0, 0.0], [[0.0, 1.0], [0.0, 1.0]], beta=0.0) == pytest.approx([1.0, 0.0])


# --- through the search domain with the real embedder ------------------------------------------------------
class Counting:
    """Passes every call through to the real object and counts them by name."""

    def __init__(self, target, calls: Counter) -> None:
        self._target, self._calls = target, calls

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if not callable(value):
            return value

        def counted(*args, **kwargs):
            self._calls[name if name != "call" else args[0]] += 1
            return value(*args, **kwargs)

        return counted


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    texts = {
        "glacier": "Glaciers are rivers of ice that carve valleys as they move downhill.",
        "desert": "Deserts receive little rain; dunes of sand shift with the wind.",
        "reef": "Coral reefs grow in warm shallow seas and shelter many fish.",
        "river": "Rivers carry water and sediment from mountains to the sea.",
    }
    documents = [indexer_pb.DocumentInput(collection="default", doc_id=d, text=t) for d, t in texts.items()]
    events = [
        e async for e in mesh.stub("indexer").IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents))
    ]
    assert all(e.result.status == indexer_pb.INGEST_STATUS_INDEXED for e in events)
    return mesh


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize(("prf_docs", "store_calls"), [(3, 2), (0, 1)])
async def test_feedback_costs_one_more_store_call_and_no_second_embed_call(mesh, prf_docs, store_calls):
    calls: Counter = Counter()
    embedder = ServiceClient("embedder", mesh.addrs["embedder"], embedder_grpc.EmbedderServiceStub, timeout=10)
    try:
        searcher = Searcher(
            Counting(mesh.store, calls),
            Counting(embedder, calls),
            default_mode="hybrid",
            prefetch_limit=50,
            rrf_k=60,
            max_query_chars=1000,
            default_fusion="adaptive",
            prf_docs=prf_docs,
        )
        searched = await searcher.search(SearchIn(query="rivers of ice carve valleys", top_k=3))
    finally:
        await embedder.close()
    assert searched.plan.fusion == "adaptive" and searched.found[0].hit.payload["doc_id"] == "glacier"
    assert calls["Embed"] == 1
    assert calls["hybrid_evidence"] == store_calls and calls["query"] == 0
    assert calls["payloads"] == 1  # a lookup by id of the hits kept, not a search


@pytest.mark.asyncio(loop_scope="session")
async def test_the_embedded_store_is_searched_on_the_loops_thread_and_a_server_store_from_a_worker(mesh):
    """The embedded store holds the GIL while it works, so a worker thread would only add a hand-off and GIL waits:
    its calls run on the event loop's thread. A store whose calls wait on the network keeps them off it. Same
    results either way, for every mode and for the document and collection reads."""
    embedder = ServiceClient("embedder", mesh.addrs["embedder"], embedder_grpc.EmbedderServiceStub, timeout=10)
    found = {}
    try:
        for holds_gil in (True, False):
            store = ThreadNotingStore(mesh.store, holds_gil)
            searcher = Searcher(
                store,
                embedder,
                default_mode="hybrid",
                prefetch_limit=50,
                rrf_k=60,
                max_query_chars=1000,
                default_fusion="adaptive",
            )
            found[holds_gil] = [
                [f.hit.id for f in (await searcher.search(SearchIn(query="rivers of ice", top_k=3, mode=m))).found]
                for m in ("hybrid", "dense", "sparse")
            ]
            assert (await searcher.get_document("default", "glacier")).doc_id == "glacier"
            assert "default" in [c.name for c in await searcher.list_collections()]
            assert (store.threads() == {threading.current_thread().name}) == holds_gil, store.ran
    finally:
        await embedder.close()
    assert found[True] == found[False] and found[True][0]
