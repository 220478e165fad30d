"""The indexer over real gRPC: converter, embedder (hash backend), indexer and search in this process, one
embedded store. Counts of stored points are read from the store itself."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.config import ConfigError
from ragmesh_indexer.server import create_server as create_indexer
from ragmesh_search.server import create_server as create_search
from ragmesh_store import EdgeStore

DOCUMENTS = Path(__file__).resolve().parents[4] / "shared" / "documents"
pytestmark = pytest.mark.asyncio(loop_scope="session")


def paragraphs(n: int, topic: str = "ocean") -> str:
    """n distinct paragraphs of ~60 words each."""
    return "\n\n".join(
        f"Paragraph {i} about the {topic}. " + " ".join(f"{topic}{i}word{j}" for j in range(55)) for i in range(n)
    )


def text_doc(text: str, *, collection: str = "", doc_id: str = "", title: str = "", metadata=None):
    struct = struct_pb2.Struct()
    struct.update(metadata or {})
    return pb.DocumentInput(collection=collection, doc_id=doc_id, title=title, text=text, metadata=struct)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    return await mesh_factory(indexer={"chunk_tokens": 64})


@pytest.fixture
def indexer(mesh):
    return mesh.stub("indexer")


@pytest.fixture
def search(mesh):
    return mesh.stub("search")


async def ingest(indexer, document: pb.DocumentInput) -> pb.IngestResult:
    return (await indexer.IngestDocument(pb.IngestDocumentRequest(document=document))).result


def stored_ids(mesh, collection: str, doc_id: str) -> set[str]:
    return set(mesh.store.document_chunk_ids(collection, doc_id))


async def test_ingest_text_stores_every_chunk_with_its_payload(mesh, indexer):
    text = "# Tides\n\n" + paragraphs(5)
    result = await ingest(
        indexer,
        text_doc(text, collection="ing-payload", doc_id="tides", metadata={"year": 2024, "lang": "en", "draft": False}),
    )
    assert result.status == pb.INGEST_STATUS_INDEXED
    assert (result.doc_id, result.collection, result.title) == ("tides", "ing-payload", "Tides")
    assert result.chunks > 3  # 64-token chunks
    chunks = mesh.store.document_chunks("ing-payload", "tides")
    assert [c.payload["chunk_index"] for c in chunks] == list(range(result.chunks))
    first = chunks[0].payload
    assert first["source"] == "text" and first["chunk_count"] == result.chunks
    assert first["metadata"] == {"year": 2024, "lang": "en", "draft": False}
    assert first["content_hash"] == result.content_hash and first["ingested_at"].endswith("+00:00")
    for chunk in chunks:  # every chunk is an exact slice of the document at its recorded offset
        p = chunk.payload
        assert text[p["start"] : p["start"] + len(p["text"])] == p["text"]


async def test_doc_id_defaults_to_the_content_hash_and_reingest_is_unchanged(mesh, indexer):
    text = paragraphs(3, "forest")
    first = await ingest(indexer, text_doc(text, collection="ing-same"))
    assert len(first.doc_id) == 32
    ids = stored_ids(mesh, "ing-same", first.doc_id)
    again = await ingest(indexer, text_doc(text, collection="ing-same"))
    assert again.status == pb.INGEST_STATUS_UNCHANGED
    assert (again.doc_id, again.chunks, again.content_hash) == (first.doc_id, first.chunks, first.content_hash)
    assert stored_ids(mesh, "ing-same", first.doc_id) == ids
    assert mesh.store.stats("ing-same").chunks == first.chunks


async def test_shorter_new_version_leaves_no_orphan_chunks(mesh, indexer, search):
    long = await ingest(indexer, text_doc(paragraphs(8, "desert"), collection="ing-orphans", doc_id="d"))
    short = await ingest(indexer, text_doc(paragraphs(2, "glacier"), collection="ing-orphans", doc_id="d"))
    assert short.status == pb.INGEST_STATUS_INDEXED and short.chunks < long.chunks
    assert len(stored_ids(mesh, "ing-orphans", "d")) == short.chunks
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="ing-orphans", doc_id="d"))
    assert document.text == paragraphs(2, "glacier")
    assert "desert" not in document.text


async def test_a_document_stored_with_uuid_point_ids_is_found_and_replaced_whole(mesh, indexer, search, monkeypatch):
    # Chunks got UUIDv5 ids before ids became numbers; a store written then is read and updated as it is.
    from ragmesh_indexer import service

    def uuid_id(doc_id: str, index: int) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}:{index}"))

    with monkeypatch.context() as patch:
        patch.setattr(service, "point_id", uuid_id)
        old = await ingest(indexer, text_doc(paragraphs(4, "canyon"), collection="ing-uuid", doc_id="u"))
    assert all(len(i) == 36 for i in stored_ids(mesh, "ing-uuid", "u")) and old.chunks > 1
    found = await search.Search(search_pb.SearchRequest(query="canyon2word7", collections=["ing-uuid"], top_k=3))
    assert found.results and all(len(r.chunk_id) == 36 and r.doc_id == "u" for r in found.results)
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="ing-uuid", doc_id="u"))
    assert document.text == paragraphs(4, "canyon")
    again = await ingest(indexer, text_doc(paragraphs(4, "canyon"), collection="ing-uuid", doc_id="u"))
    assert again.status == pb.INGEST_STATUS_UNCHANGED and len(stored_ids(mesh, "ing-uuid", "u")) == old.chunks

    new = await ingest(indexer, text_doc(paragraphs(3, "harbour"), collection="ing-uuid", doc_id="u"))
    assert new.status == pb.INGEST_STATUS_INDEXED
    ids = stored_ids(mesh, "ing-uuid", "u")
    assert len(ids) == new.chunks and all(i.isdigit() for i in ids)  # no UUID chunk left behind
    found = await search.Search(search_pb.SearchRequest(query="harbour1word3", collections=["ing-uuid"], top_k=3))
    assert found.results and {r.chunk_id for r in found.results} <= ids


async def test_metadata_or_title_change_reindexes(mesh, indexer):
    text = paragraphs(2, "meadow")
    first = await ingest(indexer, text_doc(text, collection="ing-meta", doc_id="m", metadata={"v": 1}))
    changed = await ingest(indexer, text_doc(text, collection="ing-meta", doc_id="m", metadata={"v": 2}))
    assert changed.status == pb.INGEST_STATUS_INDEXED and changed.content_hash != first.content_hash
    assert {c.payload["metadata"]["v"] for c in mesh.store.document_chunks("ing-meta", "m")} == {2}
    retitled = await ingest(
        indexer, text_doc(text, collection="ing-meta", doc_id="m", metadata={"v": 2}, title="Meadows")
    )
    assert retitled.status == pb.INGEST_STATUS_INDEXED
    assert {c.payload["title"] for c in mesh.store.document_chunks("ing-meta", "m")} == {"Meadows"}


async def test_ingest_docx_through_the_converter(mesh, indexer, search):
    data = (DOCUMENTS / "test.docx").read_bytes()
    result = await ingest(
        indexer, pb.DocumentInput(collection="ing-files", file=pb.FileInput(data=data, filename="test.docx"))
    )
    assert result.status == pb.INGEST_STATUS_INDEXED and result.chunks >= 1
    assert "wordprocessingml" in result.mime_type
    chunk = mesh.store.document_chunks("ing-files", result.doc_id)[0].payload
    assert (chunk["source"], chunk["filename"]) == ("upload", "test.docx")
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="ing-files", doc_id=result.doc_id))
    assert len(document.text) > 100


async def test_file_with_a_path_uses_it_as_doc_id(mesh, indexer):
    path = str(DOCUMENTS / "test.docx")
    data = (DOCUMENTS / "test.docx").read_bytes()
    result = await ingest(
        indexer, pb.DocumentInput(collection="ing-files", file=pb.FileInput(data=data, filename="test.docx", path=path))
    )
    assert result.doc_id == path
    assert mesh.store.document_chunks("ing-files", path)[0].payload["source"] == "path"


async def test_unsupported_file_is_refused_and_nothing_is_written(mesh, indexer, rpc_error):
    data = (DOCUMENTS / "random.bin").read_bytes()
    err = await rpc_error(
        indexer.IngestDocument(
            pb.IngestDocumentRequest(
                document=pb.DocumentInput(collection="ing-refused", file=pb.FileInput(data=data, filename="random.bin"))
            )
        )
    )
    assert (err.code, err.reason, err.domain) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNSUPPORTED_MEDIA_TYPE",
        "converter.ragmesh",
    )
    assert not mesh.store.collection_exists("ing-refused")


@pytest.mark.parametrize(
    ("document", "code", "reason"),
    [
        (text_doc("x", collection="Bad Name"), grpc.StatusCode.INVALID_ARGUMENT, "COLLECTION_NAME_INVALID"),
        (text_doc("x", doc_id=" padded "), grpc.StatusCode.INVALID_ARGUMENT, "DOCUMENT_ID_INVALID"),
        (text_doc("x", metadata={"nested": {"a": 1}}), grpc.StatusCode.INVALID_ARGUMENT, "METADATA_INVALID"),
        (text_doc("x", metadata={"bad key!": 1}), grpc.StatusCode.INVALID_ARGUMENT, "METADATA_INVALID"),
        (text_doc("  \n\t "), grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_DOCUMENT"),
        (text_doc(""), grpc.StatusCode.INVALID_ARGUMENT, "EMPTY_DOCUMENT"),
        (pb.DocumentInput(collection="c"), grpc.StatusCode.INVALID_ARGUMENT, "DOCUMENT_CONTENT_MISSING"),
        (pb.DocumentInput(url="http://127.0.0.1:9/x"), grpc.StatusCode.PERMISSION_DENIED, "URL_NOT_ALLOWED"),
    ],
    ids=["collection", "doc_id", "nested-metadata", "metadata-key", "blank", "empty", "no-content", "url"],
)
async def test_rejected_documents(indexer, rpc_error, document, code, reason):
    err = await rpc_error(indexer.IngestDocument(pb.IngestDocumentRequest(document=document)))
    assert (err.code, err.reason) == (code, reason)


async def test_document_over_the_size_limit_is_refused(mesh_factory, rpc_error):
    small = await mesh_factory(indexer={"max_document_bytes": 1000})
    err = await rpc_error(small.stub("indexer").IngestDocument(pb.IngestDocumentRequest(document=text_doc("y" * 1001))))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PAYLOAD_TOO_LARGE")
    assert small.store.list_collections() == []
    await small.stop()


async def test_ingest_documents_streams_one_event_per_document_with_failures_inline(indexer):
    documents = [text_doc(paragraphs(2, f"topic{i}"), collection="ing-batch", doc_id=f"b{i}") for i in range(4)]
    documents.insert(2, text_doc("   ", collection="ing-batch", doc_id="blank"))
    events = [e async for e in indexer.IngestDocuments(pb.IngestDocumentsRequest(documents=documents))]
    assert sorted(e.index for e in events) == list(range(5))
    assert [e.completed for e in events] == [1, 2, 3, 4, 5] and {e.total for e in events} == {5}
    failed = [e for e in events if e.result.status == pb.INGEST_STATUS_FAILED]
    assert [e.index for e in failed] == [2]
    assert (failed[0].error.code, failed[0].error.reason, failed[0].error.domain) == (
        "INVALID_ARGUMENT",
        "EMPTY_DOCUMENT",
        "indexer.ragmesh",
    )
    indexed = {e.result.doc_id for e in events if e.result.status == pb.INGEST_STATUS_INDEXED}
    assert indexed == {"b0", "b1", "b2", "b3"}


async def test_concurrent_ingests_of_one_document_end_consistent(mesh, indexer, search):
    versions = [paragraphs(n, f"v{n}") for n in (7, 2, 5, 3)]
    results = await asyncio.gather(*(ingest(indexer, text_doc(v, collection="ing-race", doc_id="r")) for v in versions))
    chunks = mesh.store.document_chunks("ing-race", "r")
    hashes = {c.payload["content_hash"] for c in chunks}
    assert len(hashes) == 1  # all chunks from one version, none left over from another
    winner = next(r for r in results if r.content_hash in hashes)
    assert len(chunks) == winner.chunks == chunks[0].payload["chunk_count"]
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="ing-race", doc_id="r"))
    assert document.text in versions


async def test_delete_document(mesh, indexer, rpc_error):
    result = await ingest(indexer, text_doc(paragraphs(3, "canyon"), collection="ing-delete", doc_id="gone"))
    reply = await indexer.DeleteDocument(pb.DeleteDocumentRequest(collection="ing-delete", doc_id="gone"))
    assert reply.deleted_chunks == result.chunks
    assert stored_ids(mesh, "ing-delete", "gone") == set()
    again = await rpc_error(indexer.DeleteDocument(pb.DeleteDocumentRequest(collection="ing-delete", doc_id="gone")))
    assert (again.code, again.reason) == (grpc.StatusCode.NOT_FOUND, "DOCUMENT_NOT_FOUND")
    missing = await rpc_error(indexer.DeleteDocument(pb.DeleteDocumentRequest(collection="nope", doc_id="x")))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND")
    no_id = await rpc_error(indexer.DeleteDocument(pb.DeleteDocumentRequest(collection="ing-delete")))
    assert no_id.reason == "DOCUMENT_ID_INVALID"


async def test_collections_create_and_delete(mesh, indexer, rpc_error):
    created = await indexer.CreateCollection(pb.CreateCollectionRequest(name="ing-coll"))
    assert (created.name, created.created) == ("ing-coll", True)
    assert (await indexer.CreateCollection(pb.CreateCollectionRequest(name="ing-coll"))).created is False
    result = await ingest(indexer, text_doc(paragraphs(2), collection="ing-coll", doc_id="a"))
    deleted = await indexer.DeleteCollection(pb.DeleteCollectionRequest(name="ing-coll"))
    assert (deleted.name, deleted.deleted_chunks) == ("ing-coll", result.chunks)
    assert not mesh.store.collection_exists("ing-coll")
    err = await rpc_error(indexer.DeleteCollection(pb.DeleteCollectionRequest(name="ing-coll")))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "COLLECTION_NOT_FOUND")
    for bad in ("", "UPPER", "-dash"):
        err = await rpc_error(indexer.CreateCollection(pb.CreateCollectionRequest(name=bad)))
        assert err.reason == "COLLECTION_NAME_INVALID"
        err = await rpc_error(indexer.DeleteCollection(pb.DeleteCollectionRequest(name=bad)))
        assert err.reason == "COLLECTION_NAME_INVALID"


@pytest.mark.parametrize("service", ["indexer", "search"])
async def test_start_up_fails_clearly_when_another_process_owns_the_store(mesh, monkeypatch, service):

    monkeypatch.setenv("RAGMESH_DATA_DIR", str(mesh.data_dir))  # held by the running mesh's store
    create = {"indexer": create_indexer, "search": create_search}[service]
    settings = mesh.settings[service].model_copy(update={"port": 0})
    with pytest.raises(ConfigError, match="cannot open the store"):
        await create(settings)


async def test_own_store_is_opened_with_the_embedders_dimension_and_closed_on_stop(mesh, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGMESH_DATA_DIR", str(tmp_path))
    service = await create_indexer(mesh.settings["indexer"].model_copy(update={"port": 0}))
    await service.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
    result = (
        await pb_grpc.IndexerServiceStub(channel).IngestDocument(
            pb.IngestDocumentRequest(document=text_doc(paragraphs(1), collection="own"))
        )
    ).result
    assert result.status == pb.INGEST_STATUS_INDEXED
    await channel.close()
    await service.stop(0)
    reopened = EdgeStore(tmp_path, 384)  # the lock was released on stop
    assert reopened.stats("own").chunks == result.chunks
    reopened.close()
