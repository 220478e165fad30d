"""The query-embedding cache: a repeated query skips the embedder (counted by the embedder's own request
metrics), entries of another mode or model never answer, the cache stays within its size, and its hits and
misses are exported as Prometheus metrics."""

from __future__ import annotations

import pytest
import pytest_asyncio
from prometheus_client import generate_latest
from ragmesh.indexer.v1 import indexer_service_pb2 as indexer_pb
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_search.cache import QueryCache
from ragmesh_search.metrics import QueryCacheMetrics

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory(search={"query_cache_size": 3})
    documents = [
        indexer_pb.DocumentInput(collection="cache", doc_id=f"d{i}", text=f"glacier {i} ice moraine {i}")
        for i in range(5)
    ]
    async for _ in mesh.stub("indexer").IngestDocuments(indexer_pb.IngestDocumentsRequest(documents=documents)):
        pass
    return mesh


def metric(name: str) -> float:
    return setup_telemetry("search").registry.get_sample_value(name) or 0.0


async def search(mesh, query: str, mode=pb.SEARCH_MODE_HYBRID) -> pb.SearchResponse:
    return await mesh.stub("search").Search(pb.SearchRequest(query=query, collections=["cache"], mode=mode, top_k=3))


async def test_a_repeated_query_is_not_embedded_again(mesh, rpc_count):
    embeds, hits = rpc_count("embedder", "Embed"), metric("ragmesh_search_query_cache_hits_total")
    first = await search(mesh, "glacier 3")
    again = await search(mesh, "glacier 3")
    assert rpc_count("embedder", "Embed") - embeds == 1
    assert metric("ragmesh_search_query_cache_hits_total") - hits == 1
    assert [(r.chunk_id, r.score) for r in again.results] == [(r.chunk_id, r.score) for r in first.results]


async def test_modes_do_not_share_entries(mesh, rpc_count):
    embeds = rpc_count("embedder", "Embed")
    dense = await search(mesh, "moraine 2", pb.SEARCH_MODE_DENSE)
    sparse = await search(mesh, "moraine 2", pb.SEARCH_MODE_SPARSE)  # needs the BM25 vector the dense entry lacks
    await search(mesh, "moraine 2", pb.SEARCH_MODE_DENSE)
    assert rpc_count("embedder", "Embed") - embeds == 2
    assert dense.results and sparse.results and sparse.results[0].doc_id == "d2"


async def test_the_cache_keeps_only_its_size_least_recently_used_out_first(mesh, rpc_count):
    for query in ("ice 0", "ice 1", "ice 2", "ice 3"):  # size 3: "ice 0" is evicted
        await search(mesh, query)
    assert metric("ragmesh_search_query_cache_entries") == 3
    embeds = rpc_count("embedder", "Embed")
    await search(mesh, "ice 3")
    assert rpc_count("embedder", "Embed") == embeds
    await search(mesh, "ice 0")
    assert rpc_count("embedder", "Embed") == embeds + 1


async def test_hits_and_misses_are_exported(mesh):
    await search(mesh, "exported once")
    await search(mesh, "exported once")
    text = generate_latest(setup_telemetry("search").registry).decode()
    for name in (
        "ragmesh_search_query_cache_hits_total",
        "ragmesh_search_query_cache_misses_total",
        "ragmesh_search_query_cache_entries",
    ):
        assert f"\n{name} " in text
    assert metric("ragmesh_search_query_cache_hits_total") >= 1
    assert metric("ragmesh_search_query_cache_misses_total") >= 1


async def test_size_zero_turns_the_cache_off(mesh_factory, rpc_count):
    off = await mesh_factory(search={"query_cache_size": 0})
    await off.stub("indexer").IngestDocument(
        indexer_pb.IngestDocumentRequest(
            document=indexer_pb.DocumentInput(collection="cache", doc_id="x", text="tundra permafrost")
        )
    )
    embeds = rpc_count("embedder", "Embed")
    for _ in range(3):
        await search(off, "tundra")
    assert rpc_count("embedder", "Embed") - embeds == 3
    await off.stop()


async def test_another_model_never_answers_and_a_model_replaced_under_its_name_drops_its_entries():
    cache = QueryCache(10, QueryCacheMetrics(registry=None))
    cache.put(("q", (1,), "model-a"), "vectors of a", "id-a")
    assert cache.get(("q", (1,), "model-b")) is None
    assert cache.get(("q", (1,), "model-a")) is not None and cache.get(("q", (2,), "model-a")) is None  # other kinds
    cache.put(("q", (1,), "model-b"), "vectors of b", "id-b")  # two models served side by side: both kept
    assert (cache.get(("q", (1,), "model-a")), cache.get(("q", (1,), "model-b"))) == ("vectors of a", "vectors of b")
    cache.put(("r", (1,), "model-a"), "new vectors of a", "id-a2")  # the embedder now serves another model as a
    assert len(cache) == 2 and cache.get(("q", (1,), "model-a")) is None
    assert cache.get(("q", (1,), "model-b")) == "vectors of b"
