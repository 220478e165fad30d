"""Versioned collections over real gRPC against the in-process mesh (embedded store, SQLite queue): a re-index
builds a new version from the stored text, writes meanwhile reach both versions, the gate switches or rejects,
rollback restores the previous version, a cancelled re-index leaves nothing behind, and every reject path."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_store.documents import reassemble
from ragmesh_store.versions import read_versions

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOPICS = {
    "tides": "The tide rises twice a day as the moon pulls the ocean; spring tides come at full and new moon.",
    "bread": "Bread dough rises when yeast ferments the sugars and releases carbon dioxide into the gluten.",
    "glacier": "A glacier creeps down its valley, carving moraines of granite and gneiss as the ice moves.",
    "volcano": "Magma rises through the crust and erupts from the volcano as lava, ash and hot gases.",
    "orchard": "The apple orchard blooms in spring; bees carry pollen between the blossoms of the trees.",
    "comet": "A comet's tail of dust and gas points away from the sun as it swings through the inner system.",
}
QUERIES = {
    "q1": ("moon and ocean tide", "tides"),
    "q2": ("yeast in dough", "bread"),
    "q3": ("ice carving moraines", "glacier"),
    "q4": ("lava and ash eruption", "volcano"),
}


def text_of(topic: str) -> str:
    return "\n\n".join(f"## Part {i}\n\n{TOPICS[topic]} Section {i} adds more about {topic}." for i in range(6))


async def wait_job(indexer, job_id: str, timeout: float = 120) -> pb.Job:
    async with asyncio.timeout(timeout):
        while True:
            job = (await indexer.GetJob(pb.GetJobRequest(job_id=job_id))).job
            if job.state in (pb.JOB_STATE_DONE, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED, pb.JOB_STATE_REJECTED):
                return job
            await asyncio.sleep(0.1)


async def fill(mesh, collection: str, topics=TOPICS) -> None:
    indexer = mesh.stub("indexer")
    for topic in topics:
        await indexer.IngestDocument(
            pb.IngestDocumentRequest(
                document=pb.DocumentInput(
                    collection=collection,
                    doc_id=topic,
                    text=text_of(topic),
                    title=topic.title(),
                    metadata={"topic": topic},
                )
            )
        )


async def golden(mesh, collection: str) -> None:
    await mesh.stub("search").SetGoldenSet(
        search_pb.SetGoldenSetRequest(
            collection=collection,
            queries=[
                search_pb.GoldenQuery(query_id=qid, text=text, relevant={doc: 2})
                for qid, (text, doc) in QUERIES.items()
            ],
        )
    )


def reindexes(decision: str) -> float:
    """Re-indexes ended with `decision`, as the indexer's Prometheus counter has them."""
    registry = setup_telemetry("indexer").registry
    return registry.get_sample_value("ragmesh_indexer_reindexes_total", {"decision": decision}) or 0


def stored_text(store, physical: str, doc_id: str) -> str:
    return reassemble(store.document_chunks(physical, doc_id))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    return await mesh_factory(indexer={"chunk_tokens": 64, "job_batch_size": 2})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def idle(mesh_factory):
    """A mesh whose indexer runs no job workers: a re-index stays `building` for as long as a test needs."""
    return await mesh_factory(indexer={"chunk_tokens": 64, "job_workers": 0})


async def test_a_reindex_to_smaller_chunks_switches_and_keeps_the_old_version_for_rollback(mesh):
    indexer, store = mesh.stub("indexer"), mesh.store
    await fill(mesh, "ver")
    await golden(mesh, "ver")
    v1_chunks = store.stats("ver").chunks

    created = (await indexer.ReindexCollection(pb.ReindexCollectionRequest(collection="ver", chunk_tokens=32))).job
    assert created.kind == "reindex" and created.total == len(TOPICS)
    assert (created.reindex.from_version, created.reindex.to_version) == (1, 2)
    assert created.reindex.settings.chunk_tokens == 32 and created.reindex.tolerance == pytest.approx(0.01)
    switches = reindexes("switched")
    job = await wait_job(indexer, created.job_id)
    assert job.state == pb.JOB_STATE_DONE, job
    assert reindexes("switched") == switches + 1
    assert (job.indexed, job.failed) == (len(TOPICS), 0)
    assert job.reindex.decision == "switched"
    assert job.reindex.current.version == 1 and job.reindex.candidate.version == 2
    assert job.reindex.current.queries == len(QUERIES) and job.reindex.candidate.ndcg_at_10 > 0

    versions = read_versions(store, "ver")
    assert versions.active == 2
    assert {v.version: v.state for v in versions.versions} == {1: "previous", 2: "active"}
    assert versions.get(1).settings.chunk_tokens == 64 and versions.get(2).settings.chunk_tokens == 32
    assert versions.get(1).retained_until and versions.get(2).job_id == created.job_id
    # Built from the stored text: every document whole, in more (smaller) chunks, its fields carried over.
    assert store.stats("ver.v2").chunks > v1_chunks
    for topic in TOPICS:
        assert stored_text(store, "ver.v2", topic) == text_of(topic)
        first = store.document_chunks("ver.v2", topic)[0].payload
        assert (first["title"], first["metadata"], first["collection"]) == (topic.title(), {"topic": topic}, "ver")
    assert "ver.v2" not in store.list_collections()

    # After the switch a write goes to the active version and to the one kept for a rollback ...
    await fill(mesh, "ver", {"comet": TOPICS["comet"]})
    assert stored_text(store, "ver.v2", "comet") == stored_text(store, "ver", "comet") == text_of("comet")
    # ... so rolling back loses nothing.
    rolled = await indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="ver"))
    assert (rolled.collection, rolled.version, rolled.replaced_version) == ("ver", 1, 2)
    versions = read_versions(store, "ver")
    assert versions.active == 1 and versions.get(2).state == "previous"
    assert stored_text(store, "ver", "comet") == text_of("comet")
    # And forward again.
    assert (await indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="ver"))).version == 2


async def test_writes_during_a_reindex_reach_both_versions_and_a_cancel_drops_the_new_one(idle, rpc_error):
    indexer, store = idle.stub("indexer"), idle.store
    await fill(idle, "busy", {t: TOPICS[t] for t in ("tides", "bread", "glacier")})
    created = (await indexer.ReindexCollection(pb.ReindexCollectionRequest(collection="busy", chunk_tokens=40))).job
    assert created.state == pb.JOB_STATE_QUEUED
    assert read_versions(store, "busy").get(2).state == "building"

    await fill(idle, "busy", {"volcano": TOPICS["volcano"]})  # a new document
    await indexer.DeleteDocument(pb.DeleteDocumentRequest(collection="busy", doc_id="bread"))
    assert stored_text(store, "busy.v2", "volcano") == stored_text(store, "busy", "volcano") == text_of("volcano")
    assert store.document_chunk_ids("busy", "bread") == [] == store.document_chunk_ids("busy.v2", "bread")
    # Not copied yet (no workers): the untouched documents are only in version 1.
    assert store.document_chunk_ids("busy.v2", "tides") == []

    # A second re-index while one runs is refused, naming the job.
    err = await rpc_error(indexer.ReindexCollection(pb.ReindexCollectionRequest(collection="busy", chunk_tokens=48)))
    assert err.reason == "REINDEX_IN_PROGRESS" and created.job_id in err.message
    err = await rpc_error(indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="busy")))
    assert err.reason == "REINDEX_IN_PROGRESS"

    cancels = reindexes("cancelled")
    cancelled = (await indexer.CancelJob(pb.CancelJobRequest(job_id=created.job_id))).job
    assert cancelled.state == pb.JOB_STATE_CANCELLED
    assert reindexes("cancelled") == cancels + 1  # what an SRE's dashboard counts
    versions = read_versions(store, "busy")
    assert [v.version for v in versions.versions] == [1] and versions.active == 1
    assert not store.collection_exists("busy.v2")
    await fill(idle, "busy", {"orchard": TOPICS["orchard"]})  # writes no longer go to the dropped version
    assert not store.collection_exists("busy.v2")
    # Numbers are never reused: the next re-index builds version 3.
    again = (await indexer.ReindexCollection(pb.ReindexCollectionRequest(collection="busy"))).job
    assert again.reindex.to_version == 3
    await indexer.CancelJob(pb.CancelJobRequest(job_id=again.job_id))


async def test_deleting_a_collection_deletes_every_version(mesh):
    indexer, store = mesh.stub("indexer"), mesh.store
    await fill(mesh, "gone", {"tides": TOPICS["tides"]})
    job = (await indexer.ReindexCollection(pb.ReindexCollectionRequest(collection="gone", chunk_tokens=32))).job
    assert (await wait_job(indexer, job.job_id)).reindex.decision == "no_golden_set"
    assert store.collection_exists("gone.v2")
    await indexer.DeleteCollection(pb.DeleteCollectionRequest(name="gone"))
    assert not store.collection_exists("gone") and not store.collection_exists("gone.v2")


async def test_reindex_and_rollback_reject_bad_requests(mesh, rpc_error):
    indexer = mesh.stub("indexer")
    await fill(mesh, "strict", {"tides": TOPICS["tides"]})
    cases = [
        (pb.ReindexCollectionRequest(collection="nope"), "COLLECTION_NOT_FOUND"),
        (pb.ReindexCollectionRequest(collection="Bad Name"), "COLLECTION_NAME_INVALID"),
        (pb.ReindexCollectionRequest(collection="strict", chunk_tokens=8), "CHUNK_TOKENS_OUT_OF_RANGE"),
        (
            pb.ReindexCollectionRequest(collection="strict", chunk_tokens=64, chunk_overlap_tokens=32),
            "CHUNK_OVERLAP_OUT_OF_RANGE",
        ),
        (pb.ReindexCollectionRequest(collection="strict", tolerance=1.5), "TOLERANCE_OUT_OF_RANGE"),
        (pb.ReindexCollectionRequest(collection="strict", retention_seconds=-1), "RETENTION_OUT_OF_RANGE"),
        (pb.ReindexCollectionRequest(collection="strict", model="no-such-model"), "MODEL_NOT_FOUND"),
    ]
    for request, reason in cases:
        assert (await rpc_error(indexer.ReindexCollection(request))).reason == reason, request
    assert read_versions(mesh.store, "strict").recorded is False  # nothing was recorded by a refusal
    err = await rpc_error(indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="strict")))
    assert err.reason == "NO_PREVIOUS_VERSION"
    err = await rpc_error(indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="nope")))
    assert err.reason == "COLLECTION_NOT_FOUND"


async def test_a_reindex_with_no_retention_drops_the_old_version_at_once(mesh, rpc_error):
    indexer, store = mesh.stub("indexer"), mesh.store
    await fill(mesh, "short", {"tides": TOPICS["tides"], "bread": TOPICS["bread"]})
    job = (
        await indexer.ReindexCollection(
            pb.ReindexCollectionRequest(collection="short", chunk_tokens=32, retention_seconds=0)
        )
    ).job
    assert (await wait_job(indexer, job.job_id)).state == pb.JOB_STATE_DONE
    versions = read_versions(store, "short")
    assert [(v.version, v.state) for v in versions.versions] == [(2, "active")]
    assert store.stats("short").chunks == 0  # version 1's points are gone; the name keeps the records
    assert store.collection_record("short", "versions") is not None
    assert stored_text(store, "short.v2", "bread") == text_of("bread")
    err = await rpc_error(indexer.RollbackCollection(pb.RollbackCollectionRequest(collection="short")))
    assert err.reason == "NO_PREVIOUS_VERSION"
