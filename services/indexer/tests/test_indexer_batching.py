"""Batch ingest as users see it: many documents of one IngestDocuments call (or one `Indexer.ingest_batch`) are
embedded together in few Embed calls, each is acknowledged only once its chunks are stored, a bad document
fails alone, and the single-document guarantees (unchanged skip, no orphans) hold inside a batch.

The Embed calls are counted by the embedder's own request metrics (the real server's interceptor)."""

from __future__ import annotations

import threading

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from ragmesh.converter.v1 import converter_service_pb2_grpc as converter_grpc
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError
from ragmesh_indexer.chunking import Chunker
from ragmesh_indexer.model import DocumentIn, IngestOutcome
from ragmesh_indexer.service import INLINE_CHUNK_CHARS, Indexer

from tests.support.threads import ThreadNotingStore

pytestmark = pytest.mark.asyncio(loop_scope="session")


def doc(text: str, doc_id: str, collection: str = "batch", **metadata) -> pb.DocumentInput:
    struct = struct_pb2.Struct()
    struct.update(metadata)
    return pb.DocumentInput(collection=collection, doc_id=doc_id, text=text, metadata=struct)


def passage(i: int, words: int = 30) -> str:
    return f"Passage {i} about rivers. " + " ".join(f"river{i}word{j}" for j in range(words))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    # The embedder refuses texts over 600 characters: a way to make one document's chunk bad at embed time.
    return await mesh_factory(indexer={"chunk_tokens": 64}, embedder={"max_text_chars": 600})


async def ingest_stream(mesh, documents: list[pb.DocumentInput], check_stored: bool = True) -> list:
    """The events of one IngestDocuments call; with `check_stored`, each indexed document's chunks must
    already be in the store when its event arrives (acknowledged only after the write)."""
    events = []
    async for event in mesh.stub("indexer").IngestDocuments(pb.IngestDocumentsRequest(documents=documents)):
        if check_stored and event.result.status == pb.INGEST_STATUS_INDEXED:
            stored = mesh.store.document_chunk_ids(event.result.collection, event.result.doc_id)
            assert len(stored) == event.result.chunks, event
        events.append(event)
    return events


async def test_many_small_documents_are_embedded_in_few_embed_calls(mesh, rpc_count):
    documents = [doc(passage(i), f"p{i}") for i in range(60)]
    before = rpc_count("embedder", "Embed")
    events = await ingest_stream(mesh, documents)
    calls = rpc_count("embedder", "Embed") - before
    assert sorted(e.index for e in events) == list(range(60))
    assert {e.result.status for e in events} == {pb.INGEST_STATUS_INDEXED}
    assert calls <= 3, f"{calls} Embed calls for 60 one-chunk documents"  # one call per document before
    assert mesh.store.stats("batch").documents == 60


async def test_events_count_up_and_every_document_is_reported_once(mesh):
    documents = [doc(passage(i, 80), f"e{i}", "events") for i in range(12)]
    events = await ingest_stream(mesh, documents)
    assert [e.completed for e in events] == list(range(1, 13)) and {e.total for e in events} == {12}
    assert sorted(e.index for e in events) == list(range(12))
    assert all(e.result.doc_id == f"e{e.index}" for e in events)


async def test_a_bad_document_fails_alone_at_any_stage(mesh):
    # 40 words of 20 hieroglyphs: one [UNK] token each, so one 839-character chunk that the embedder refuses
    # (TEXT_TOO_LONG), found only at embed time.
    long_word = " ".join(["\U00013000" * 20] * 40)
    documents = [doc(passage(i), f"ok{i}", "alone") for i in range(6)]
    documents.insert(1, doc("   ", "blank", "alone"))  # refused while preparing
    documents.insert(3, doc(long_word, "too-long", "alone"))  # refused by the embedder
    documents.insert(5, doc(passage(99), "bad-collection", "Not Valid!"))  # refused before anything
    documents.insert(7, doc(passage(98), "bad-metadata", "alone", nested={"a": 1}))  # refused by the servicer
    events = {e.index: e for e in await ingest_stream(mesh, documents)}
    assert len(events) == len(documents)
    failed = {
        documents[i].doc_id: (e.error.code, e.error.reason)
        for i, e in events.items()
        if e.result.status == pb.INGEST_STATUS_FAILED
    }
    assert failed == {
        "blank": ("INVALID_ARGUMENT", "EMPTY_DOCUMENT"),
        "too-long": ("INVALID_ARGUMENT", "TEXT_TOO_LONG"),
        "bad-collection": ("INVALID_ARGUMENT", "COLLECTION_NAME_INVALID"),
        "bad-metadata": ("INVALID_ARGUMENT", "METADATA_INVALID"),
    }
    assert events[3].error.domain == "embedder.ragmesh"
    assert mesh.store.document_chunk_ids("alone", "too-long") == []  # nothing half-written
    assert {f"ok{i}" for i in range(6)} == {
        e.result.doc_id for e in events.values() if e.result.status == pb.INGEST_STATUS_INDEXED
    }


async def test_unchanged_documents_are_skipped_and_replaced_ones_leave_no_orphans(mesh):
    long_text = "\n\n".join(passage(i, 50) for i in range(6))
    first = await ingest_stream(mesh, [doc(passage(1), "same", "versions"), doc(long_text, "shrinks", "versions")])
    long_chunks = {e.result.doc_id: e.result.chunks for e in first}["shrinks"]
    assert long_chunks > 2
    second = await ingest_stream(
        mesh,
        [
            doc(passage(1), "same", "versions"),
            doc(passage(2, 5), "shrinks", "versions"),
            doc(passage(3), "new", "versions"),
        ],
    )
    status = {e.result.doc_id: e.result.status for e in second}
    assert status == {
        "same": pb.INGEST_STATUS_UNCHANGED,
        "shrinks": pb.INGEST_STATUS_INDEXED,
        "new": pb.INGEST_STATUS_INDEXED,
    }
    chunks = mesh.store.document_chunks("versions", "shrinks")
    new_hash = next(e.result.content_hash for e in second if e.result.doc_id == "shrinks")
    assert len(chunks) == 1 and chunks[0].payload["text"].startswith("Passage 2")  # the old chunks are gone
    assert chunks[0].payload["content_hash"] == new_hash


async def test_one_document_twice_in_a_batch_ends_as_one_version(mesh):
    versions = [passage(7, 20), "\n\n".join(passage(i, 50) for i in range(4)), passage(8, 20)]
    events = await ingest_stream(mesh, [doc(v, "twice", "twice") for v in versions], check_stored=False)
    assert len(events) == 3 and {e.result.status for e in events} <= {
        pb.INGEST_STATUS_INDEXED,
        pb.INGEST_STATUS_UNCHANGED,
    }
    chunks = mesh.store.document_chunks("twice", "twice")
    assert len({c.payload["content_hash"] for c in chunks}) == 1
    assert len(chunks) == chunks[0].payload["chunk_count"]


async def test_ingest_batch_returns_outcomes_in_input_order(mesh):
    """The domain entry point other parts of the indexer (jobs) call."""
    settings = mesh.settings["indexer"]
    converter = ServiceClient("converter", mesh.addrs["converter"], converter_grpc.ConverterServiceStub, timeout=30)
    embedder = ServiceClient("embedder", mesh.addrs["embedder"], embedder_grpc.EmbedderServiceStub, timeout=30)
    indexer = Indexer(
        mesh.store,
        converter,
        embedder,
        Chunker(settings.tokenizer_path, 64, 0),
        max_concurrent_documents=2,
        max_document_bytes=10_000,
    )
    try:
        outcomes = await indexer.ingest_batch(
            [
                DocumentIn(collection="domain", doc_id=f"d{i}", text=passage(i))
                if i != 2
                else DocumentIn(collection="domain", doc_id="empty", text="")
                for i in range(5)
            ]
        )
    finally:
        await converter.close()
        await embedder.close()
    assert [type(o) for o in outcomes] == [IngestOutcome, IngestOutcome, RagmeshError, IngestOutcome, IngestOutcome]
    assert [o.doc_id for o in outcomes if isinstance(o, IngestOutcome)] == ["d0", "d1", "d3", "d4"]
    assert (outcomes[2].code, outcomes[2].reason) == (grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_DOCUMENT")


async def test_a_batch_larger_than_the_embedders_queue_still_gets_in(mesh_factory):
    """The embedder takes 2 texts at a time and each takes 100 ms: the batch's Embed calls overflow its queue, so
    the documents go one by one - after the batch's own accepted call is through, or every one of them would
    find the queue still full of it and be refused (a client retrying the batch would never get in)."""
    small = await mesh_factory(embedder={"max_queue_texts": 2, "max_texts_per_request": 2, "hash_delay_ms": 100})
    events = await ingest_stream(small, [doc(f"Kelp forest number {i}.", f"k{i}", "small-queue") for i in range(8)])
    assert {e.index: pb.IngestStatus.Name(e.result.status) for e in events} == {
        i: "INGEST_STATUS_INDEXED" for i in range(8)
    }, [e.error for e in events if e.error.reason]
    assert small.store.stats("small-queue").documents == 8


class _NotedChunker(Chunker):
    """A chunker that notes the thread and the size of each document it splits."""

    ran: list

    def split(self, text: str, **kwargs):
        self.ran.append((len(text), threading.current_thread().name))
        return super().split(text, **kwargs)


@pytest.mark.parametrize("holds_gil", [True, False])
async def test_quick_reads_and_small_documents_stay_on_the_loops_thread_with_the_embedded_store(mesh, holds_gil):
    """With a store that holds the GIL (the embedded one), a document's quick reads (the collection's versions,
    its stored hash) and the chunking of a small document run on the event loop's thread: a pool thread would add
    only a hand-off. A large document is still chunked in the chunk pool and the upsert still runs off the loop
    (the engine gives the GIL back while it writes). A store that waits on the network keeps every call off it."""
    settings = mesh.settings["indexer"]
    converter = ServiceClient("converter", mesh.addrs["converter"], converter_grpc.ConverterServiceStub, timeout=30)
    embedder = ServiceClient("embedder", mesh.addrs["embedder"], embedder_grpc.EmbedderServiceStub, timeout=30)
    store = ThreadNotingStore(mesh.store, holds_gil)
    chunker = _NotedChunker(settings.tokenizer_path, 64, 0)
    chunker.ran = []
    indexer = Indexer(store, converter, embedder, chunker, max_concurrent_documents=2, max_document_bytes=100_000)
    large = " ".join(passage(i) for i in range(20))
    assert len(passage(0)) <= INLINE_CHUNK_CHARS < len(large)
    collection = f"threads-{str(holds_gil).lower()}"
    try:
        outcomes = await indexer.ingest_batch(
            [
                DocumentIn(collection=collection, doc_id="small", text=passage(0)),
                DocumentIn(collection=collection, doc_id="large", text=large),
            ]
        )
    finally:
        indexer.close()
        await converter.close()
        await embedder.close()
    assert [(o.doc_id, o.status) for o in outcomes] == [("small", "indexed"), ("large", "indexed")]
    assert mesh.store.stats(collection).documents == 2
    loop = threading.current_thread().name
    on_loop = {name for name, thread in store.ran if thread == loop}
    assert on_loop == ({"collection_record", "document_hash"} if holds_gil else set()), store.ran
    assert {name for name, _ in store.ran} >= {"collection_record", "document_hash", "upsert"}
    split = dict(chunker.ran)
    assert split[len(passage(0))] == (loop if holds_gil else "indexer-chunk_0"), chunker.ran
    assert split[len(large)] == "indexer-chunk_0", chunker.ran
