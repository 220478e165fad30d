"""Versioned collections through the search service over real gRPC: a collection's name answers from its active
version (its versions record, `ragmesh_store.versions`), every response from exactly one version and says which,
switching the record switches the next search (a cached query included), each version's query is embedded with
its own model, ListCollections shows every version, and a version other than the active one is scored without
touching the history.

The two versions are written straight into the shared embedded store (vectors from the real hash embedder), as a
re-index would leave them: version 1 under the collection's name, version 2 in `shelf.v2`."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import pytest_asyncio
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store.versions import IndexSettings, write_versions

from tests.support.versions import put_documents, two_versions

pytestmark = pytest.mark.asyncio(loop_scope="session")
NAME = "shelf"
# Version 1 and version 2 hold the same documents (each chunk's title says which version it is in), except that
# "stale" is only in version 1 and "fresh" only in version 2.
COMMON = {
    "glacier": "Glaciers are rivers of ice that carve valleys as they move downhill.",
    "desert": "Deserts receive little rain; dunes of sand shift with the wind.",
}
V1 = {**COMMON, "stale": "An old note about moraine deposits."}
V2 = {**COMMON, "fresh": "A new note about fjords carved by glaciers."}
V2_SETTINGS = IndexSettings(
    model="alt",
    model_id="ragmesh/hash-384",
    dimension=384,
    sparse_model_id="bm25",
    chunk_tokens=64,
    chunk_overlap_tokens=8,
    chunker_fingerprint="f" * 16,
)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory(embedder={"extra_models": [{"name": "alt"}]})
    await put_documents(mesh, NAME, V1, "v1")
    await put_documents(mesh, f"{NAME}.v2", V2, "v2", model="alt")
    await put_documents(mesh, "other", {"atlas": "An atlas of glaciers and deserts."}, "v1")
    await put_documents(mesh, "default", {"notes": "Field notes on glaciers and deserts."}, "v1")
    return mesh


@pytest.fixture
def search(mesh):
    return mesh.stub("search")


def switch(mesh, active: int, model: str = "alt") -> None:
    """Make `active` the version of `shelf` searches use (version 2 built with embedder model `model`)."""
    write_versions(mesh.store, two_versions(NAME, active, dataclasses.replace(V2_SETTINGS, model=model)))


async def ask(search, query: str, *collections: str) -> pb.SearchResponse:
    return await search.Search(pb.SearchRequest(query=query, collections=list(collections or [NAME]), top_k=10))


def answered_by(response: pb.SearchResponse) -> set[str]:
    return {r.title for r in response.results}


def alt_texts() -> float:
    """Texts the embedder's "alt" model has embedded so far (its own metrics)."""
    return (
        setup_telemetry("embedder").registry.get_sample_value("ragmesh_embedder_texts_total", {"model": "alt"}) or 0.0
    )


async def test_a_collection_without_a_record_is_its_version_1_and_a_version_being_built_is_not_searched(mesh, search):
    mesh.store.set_collection_record(NAME, "versions", None)
    response = await ask(search, "glaciers valleys")
    assert dict(response.versions) == {NAME: 1} and answered_by(response) == {"v1"}
    switch(mesh, 1)  # version 2 is being built beside it
    response = await ask(search, "glaciers valleys")
    assert dict(response.versions) == {NAME: 1} and answered_by(response) == {"v1"}
    assert {r.collection for r in response.results} == {NAME}


async def test_switching_the_record_switches_the_next_search_and_a_cached_query_is_not_served_stale(mesh, search):
    switch(mesh, 1)
    before = await ask(search, "fjords moraine glaciers")
    assert answered_by(before) == {"v1"} and "stale" in {r.doc_id for r in before.results}
    texts = alt_texts()
    switch(mesh, 2)
    after = await ask(search, "fjords moraine glaciers")  # the same query: its vectors may be cached, not results
    assert dict(after.versions) == {NAME: 2} and answered_by(after) == {"v2"}
    assert "fresh" in {r.doc_id for r in after.results} and "stale" not in {r.doc_id for r in after.results}
    assert {r.collection for r in after.results} == {NAME}  # the name, never the physical collection
    assert alt_texts() == texts + 1  # the query was embedded with version 2's model
    switch(mesh, 1)  # a rollback
    back = await ask(search, "fjords moraine glaciers")
    assert dict(back.versions) == {NAME: 1} and answered_by(back) == {"v1"}


async def test_collections_of_other_models_are_embedded_once_per_model(mesh, search, rpc_count):
    switch(mesh, 2)
    await ask(search, "warm up", NAME, "other")
    embeds = rpc_count("embedder", "Embed")
    response = await ask(search, "glaciers and deserts", NAME, "other", "default")
    assert dict(response.versions) == {NAME: 2, "other": 1, "default": 1}
    assert {(r.collection, r.title) for r in response.results} == {(NAME, "v2"), ("other", "v1"), ("default", "v1")}
    assert rpc_count("embedder", "Embed") - embeds == 2  # "alt" for shelf, the default model for the others


async def test_a_version_whose_model_is_not_served_fails_with_the_embedders_reason(mesh, search, rpc_error):
    switch(mesh, 2, model="retired")
    try:
        err = await rpc_error(ask(search, "glaciers"))
        assert (err.code.name, err.reason) == ("NOT_FOUND", "MODEL_NOT_FOUND")
    finally:
        switch(mesh, 2)
    assert dict((await ask(search, "glaciers")).versions) == {NAME: 2}


async def test_every_response_comes_from_one_version_while_the_name_switches(mesh, search):
    stop = asyncio.Event()
    seen: list[pb.SearchResponse] = []

    async def client(i: int) -> None:
        while not stop.is_set():
            seen.append(await ask(search, f"glaciers deserts {i % 3}"))

    async def switcher() -> None:
        for n in range(40):
            await asyncio.to_thread(switch, mesh, 1 + n % 2)
            await asyncio.sleep(0.005)
        stop.set()

    await asyncio.gather(switcher(), *(client(i) for i in range(8)))
    assert len(seen) > 40
    for response in seen:
        assert answered_by(response) == {f"v{response.versions[NAME]}"}
    assert {r.versions[NAME] for r in seen} == {1, 2}


async def test_a_document_is_read_from_the_active_version(mesh, search, rpc_error):
    switch(mesh, 2)
    fresh = await search.GetDocument(pb.GetDocumentRequest(collection=NAME, doc_id="fresh"))
    assert (fresh.title, fresh.text) == ("v2", V2["fresh"])
    err = await rpc_error(search.GetDocument(pb.GetDocumentRequest(collection=NAME, doc_id="stale")))
    assert (err.code.name, err.reason) == ("NOT_FOUND", "DOCUMENT_NOT_FOUND")
    switch(mesh, 1)
    assert (await search.GetDocument(pb.GetDocumentRequest(collection=NAME, doc_id="stale"))).title == "v1"


async def test_collections_are_listed_with_every_version_and_its_own_counts(mesh, search):
    await put_documents(mesh, f"{NAME}.v2", {"extra": "One more document in version 2 only."}, "v2", model="alt")
    try:
        switch(mesh, 2)
        listed = {c.name: c for c in (await search.ListCollections(pb.ListCollectionsRequest())).collections}
        assert f"{NAME}.v2" not in listed
        shelf = listed[NAME]
        assert (shelf.version, shelf.documents, shelf.chunks) == (2, 4, 4)  # the active version's counts
        v1, v2 = shelf.versions
        assert (v1.version, v1.state, v1.documents, v1.chunks, v1.job_id) == (1, "previous", 3, 3, "")
        assert v1.retained_until == "2026-12-01T00:00:00+00:00" and not v1.HasField("settings")
        assert (v2.version, v2.state, v2.documents, v2.chunks, v2.job_id) == (2, "active", 4, 4, "job-reindex-1")
        assert v2.created_at == "2026-11-20T00:00:00+00:00"
        assert (
            v2.settings.model,
            v2.settings.model_id,
            v2.settings.dimension,
            v2.settings.chunk_tokens,
            v2.settings.chunk_overlap_tokens,
            v2.settings.chunker_fingerprint,
        ) == ("alt", "ragmesh/hash-384", 384, 64, 8, "f" * 16)
        other = listed["other"]  # never re-indexed: one implicit version 1
        assert (other.version, [(v.version, v.state, v.documents) for v in other.versions]) == (1, [(1, "active", 1)])
    finally:
        mesh.store.delete_document(f"{NAME}.v2", "extra")


def gauge(mode: str = "hybrid") -> float | None:
    for family in setup_telemetry("search").registry.collect():
        if family.name == "ragmesh_collection_quality":
            for sample in family.samples:
                if sample.labels == {"collection": NAME, "mode": mode, "metric": "ndcg_at_10"}:
                    return sample.value
    return None


async def test_another_version_is_scored_without_touching_the_history(mesh, search, rpc_error):
    switch(mesh, 2)
    # The judged documents must be in the active version: "stale" is only in version 1.
    err = await rpc_error(
        search.SetGoldenSet(
            pb.SetGoldenSetRequest(
                collection=NAME, queries=[pb.GoldenQuery(query_id="q", text="moraine deposits", relevant={"stale": 1})]
            )
        )
    )
    assert (err.code.name, err.reason) == ("NOT_FOUND", "GOLDEN_DOCUMENT_NOT_FOUND")
    await search.SetGoldenSet(
        pb.SetGoldenSetRequest(
            collection=NAME, queries=[pb.GoldenQuery(query_id="q", text="fjords", relevant={"fresh": 1})]
        )
    )

    active = (await search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=NAME))).evaluations[0]
    assert (active.version, active.ndcg_at_10, active.documents, active.model) == (2, 1.0, 3, "ragmesh/hash-384")
    assert gauge() == 1.0
    history = (await search.ListEvaluations(pb.ListEvaluationsRequest(collection=NAME))).evaluations
    assert [e.version for e in history] == [2]

    old = (await search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=NAME, version=1))).evaluations[0]
    assert (old.collection, old.version, old.ndcg_at_10, old.documents) == (NAME, 1, 0.0, 3)  # "fresh" is not in v1
    assert gauge() == 1.0  # the exported quality is still the active version's
    assert list((await search.ListEvaluations(pb.ListEvaluationsRequest(collection=NAME))).evaluations) == list(history)

    named = await search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=NAME, version=2))
    assert named.evaluations[0].version == 2  # the active one by its number: recorded like version 0
    assert len((await search.ListEvaluations(pb.ListEvaluationsRequest(collection=NAME))).evaluations) == 2

    for version, code, reason in ((7, "NOT_FOUND", "VERSION_NOT_FOUND"), (-1, "INVALID_ARGUMENT", "VERSION_INVALID")):
        err = await rpc_error(search.EvaluateCollection(pb.EvaluateCollectionRequest(collection=NAME, version=version)))
        assert (err.code.name, err.reason) == (code, reason)
    err = await rpc_error(search.EvaluateCollection(pb.EvaluateCollectionRequest(collection="other", version=2)))
    assert (err.code.name, err.reason) == ("NOT_FOUND", "GOLDEN_SET_NOT_FOUND")  # no set: nothing to score
