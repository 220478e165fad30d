"""The ingestion pipeline: convert (files, URLs) -> hash -> chunk -> embed -> upsert -> drop old chunks.

No gRPC server code here: the servicer maps requests to `DocumentIn` and results to protos. Failures are
`RagmeshError`s; reasons from the converter and the embedder pass through unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import grpc
from ragmesh.converter.v1 import converter_service_pb2 as converter_pb
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_store import ChunkPoint, SearchDefaults, Sparse, Store
from ragmesh_store.aio import store_call

from .chunking import Chunk, Chunker
from .context import CONTEXT_VERSION, embedded_text, heading_paths

log = logging.getLogger(__name__)

# Point ids are UUIDv5(NAMESPACE, "<doc_id>:<chunk_index>"): the same chunk always gets the same id.
NAMESPACE = uuid.UUID("6f1d3c2e-8a4b-5c7d-9e0f-1a2b3c4d5e6f")
_UPSERT_BATCH = 256
MAX_RRF_K = 10_000
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
Source = Literal["text", "upload", "path", "url"]


def point_id(doc_id: str, chunk_index: int) -> str:
    """The point id of a document's chunk."""
    return str(uuid.uuid5(NAMESPACE, f"{doc_id}:{chunk_index}"))


@dataclass(frozen=True)
class FileIn:
    data: bytes
    filename: str = ""
    mime_type: str = ""
    path: str = ""


@dataclass(frozen=True)
class DocumentIn:
    """One document to ingest: exactly one of text, file and url."""

    collection: str = ""
    doc_id: str = ""
    title: str = ""
    metadata: Mapping[str, validation.Scalar] = field(default_factory=dict)
    text: str | None = None
    file: FileIn | None = None
    url: str | None = None


@dataclass(frozen=True)
class IngestOutcome:
    status: Literal["indexed", "unchanged"]
    doc_id: str
    chunks: int
    collection: str
    title: str
    mime_type: str
    url: str
    content_hash: str


@dataclass(frozen=True)
class _Content:
    text: str
    title: str
    source: Source
    filename: str = ""
    url: str = ""
    mime_type: str = ""


class KeyedLocks:
    """One asyncio lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: tuple[str, str]) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)


class Indexer:
    """Ingests, deletes and manages collections. Create once per process."""

    def __init__(
        self,
        store: Store,
        converter: ServiceClient,
        embedder: ServiceClient,
        chunker: Chunker,
        *,
        max_concurrent_documents: int,
        max_document_bytes: int,
    ) -> None:
        self.store = store
        self.converter = converter
        self.embedder = embedder
        self.chunker = chunker
        self.max_document_bytes = max_document_bytes
        self._slots = asyncio.Semaphore(max_concurrent_documents)
        self._locks = KeyedLocks()
        self._model: embedder_pb.GetModelInfoResponse | None = None
        self._model_lock = asyncio.Lock()

    # --- ingest ------------------------------------------------------------------------------------------
    async def ingest(self, document: DocumentIn) -> IngestOutcome:
        """Ingest one document (waits for a free slot: at most max_concurrent_documents run at once)."""
        collection = validation.collection_name(document.collection, field="document.collection")
        if document.doc_id:
            validation.doc_id(document.doc_id, field="document.doc_id")
        async with self._slots:
            content = await self._content(document)
            if not content.text.strip():
                raise invalid_argument("EMPTY_DOCUMENT", "the document has no text to index", field="document")
            doc_id = document.doc_id or _default_doc_id(document, content)
            title = document.title or content.title or _first_heading(content.text)
            model = await self.model_info()
            content_hash = self._content_hash(content, title, document.metadata, model)
            async with self._locks.hold((collection, doc_id)):
                if await self._stored_hash(collection, doc_id) == content_hash:
                    count = len(await store_call(self.store.document_chunk_ids, collection, doc_id))
                    return _outcome("unchanged", doc_id, count, collection, title, content, content_hash)
                chunks = await asyncio.to_thread(
                    self.chunker.split, content.text,
                    max_sequence_length=model.max_sequence_length, filename=content.filename,
                )
                if not chunks:
                    raise invalid_argument("EMPTY_DOCUMENT", "the document has no text to index", field="document")
                paths = heading_paths(content.text, [c.start for c in chunks])
                embeddings = await self._embed(
                    [self._embedded_text(title, path, c, model) for c, path in zip(chunks, paths, strict=True)],
                    model)
                payload = {
                    "doc_id": doc_id, "chunk_count": len(chunks), "title": title, "source": content.source,
                    "filename": content.filename, "url": content.url, "mime_type": content.mime_type,
                    "collection": collection, "content_hash": content_hash,
                    "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
                    "metadata": dict(document.metadata),
                }
                points = [_point(i, chunk, embedding, payload) for i, (chunk, embedding)
                          in enumerate(zip(chunks, embeddings, strict=True))]
                await self._replace(collection, doc_id, points)
                log.info("indexed %s/%s: %d chunks", collection, doc_id, len(points))
                return _outcome("indexed", doc_id, len(points), collection, title, content, content_hash)

    async def model_info(self) -> embedder_pb.GetModelInfoResponse:
        """The embedder's model info, asked once (and again after a failure)."""
        async with self._model_lock:
            if self._model is None:
                info = await self.embedder.call("GetModelInfo", embedder_pb.GetModelInfoRequest())
                if info.dimension != self.store.dimension:
                    raise RagmeshError(
                        grpc.StatusCode.FAILED_PRECONDITION, "EMBEDDING_DIMENSION_MISMATCH",
                        f"the embedder's model {info.model_id!r} makes {info.dimension}-dimensional vectors but "
                        f"the store holds {self.store.dimension}-dimensional ones",
                        metadata={"model_dimension": str(info.dimension), "store_dimension": str(self.store.dimension)},
                    )
                self._model = info
            return self._model

    def _embedded_text(self, title: str, headings: list[str], chunk: Chunk,
                       model: embedder_pb.GetModelInfoResponse) -> str:
        """The chunk with its title/heading context, unless the context would push it past the model's
        window (the model would then drop the chunk's end): then the chunk alone."""
        text = embedded_text(title, headings, chunk.text)
        window = model.max_sequence_length
        if window > 0 and text != chunk.text and self.chunker.count_tokens(text) > window:
            return chunk.text
        return text

    async def _content(self, document: DocumentIn) -> _Content:
        if document.text is not None:
            _check_size(len(document.text.encode()), self.max_document_bytes)
            return _Content(document.text, "", "text")
        if document.file is not None:
            file = document.file
            _check_size(len(file.data), self.max_document_bytes)
            request = converter_pb.ConvertRequest(content=file.data, filename=file.filename, mime_type=file.mime_type)
            source: Source = "path" if file.path else "upload"
        elif document.url:
            request = converter_pb.ConvertRequest(url=document.url)
            source = "url"
        else:
            raise invalid_argument("DOCUMENT_CONTENT_MISSING", "give the document's text, file or url",
                                   field="document.content")
        converted = (await self.converter.call("Convert", request)).document
        return _Content(
            converted.markdown, converted.title, source,
            filename=converted.filename or (document.file.filename if document.file else ""),
            url=converted.url or (document.url or ""), mime_type=converted.mime_type,
        )

    def _content_hash(self, content: _Content, title: str, metadata: Mapping[str, object],
                      model: embedder_pb.GetModelInfoResponse) -> str:
        basis = {
            "text": content.text, "title": title, "metadata": dict(metadata),
            "chunker": self.chunker.fingerprint(model.max_sequence_length, content.filename),
            "model": [model.model_id, model.sparse_model_id], "context": CONTEXT_VERSION,
        }
        return hashlib.sha256(json.dumps(basis, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    async def _stored_hash(self, collection: str, doc_id: str) -> str | None:
        try:
            return await store_call(self.store.document_hash, collection, doc_id)
        except RagmeshError as exc:
            if exc.reason == "COLLECTION_NOT_FOUND":
                return None
            raise

    async def _embed(self, texts: list[str], model: embedder_pb.GetModelInfoResponse) -> list[embedder_pb.Embedding]:
        """All chunks in as few Embed calls as the embedder's batch limit allows, sent together."""
        size = model.max_batch_size if model.max_batch_size > 0 else len(texts)
        kinds = [embedder_pb.VECTOR_KIND_DENSE, embedder_pb.VECTOR_KIND_SPARSE]
        calls: list[Awaitable[embedder_pb.EmbedResponse]] = [
            self.embedder.call("Embed", embedder_pb.EmbedRequest(
                texts=texts[i:i + size], input_type=embedder_pb.INPUT_TYPE_DOCUMENT, kinds=kinds))
            for i in range(0, len(texts), size)
        ]
        embeddings = [e for response in await asyncio.gather(*calls) for e in response.embeddings]
        if len(embeddings) != len(texts):
            raise RagmeshError(grpc.StatusCode.INTERNAL, "EMBEDDING_COUNT_MISMATCH",
                               f"the embedder returned {len(embeddings)} embeddings for {len(texts)} chunks")
        truncated = sum(e.truncated for e in embeddings)
        if truncated:
            log.warning("the embedder truncated %d of %d chunks", truncated, len(texts))
        return embeddings

    async def _replace(self, collection: str, doc_id: str, points: list[ChunkPoint]) -> None:
        """Upsert the new chunks, then delete the old ones the new set does not overwrite."""
        await store_call(self.store.ensure_collection, collection)
        for i in range(0, len(points), _UPSERT_BATCH):
            await store_call(self.store.upsert, collection, points[i:i + _UPSERT_BATCH])
        new_ids = {p.id for p in points}
        stale = [i for i in await store_call(self.store.document_chunk_ids, collection, doc_id) if i not in new_ids]
        if stale:
            await store_call(self.store.delete_points, collection, stale)

    # --- deletes and collections -------------------------------------------------------------------------
    async def delete_document(self, collection: str, doc_id: str) -> int:
        collection = validation.collection_name(collection)
        if not doc_id:
            raise invalid_argument("DOCUMENT_ID_INVALID", "doc_id is required", field="doc_id")
        validation.doc_id(doc_id)
        async with self._locks.hold((collection, doc_id)):
            deleted = await store_call(self.store.delete_document, collection, doc_id)
        if deleted == 0:
            raise not_found("DOCUMENT_NOT_FOUND", f"document {doc_id!r} is not in collection {collection!r}",
                            collection=collection, doc_id=doc_id)
        return deleted

    async def create_collection(self, name: str, defaults: SearchDefaults | None = None,
                                ) -> tuple[str, bool, SearchDefaults]:
        """Create the collection if missing; store the given search defaults (fields left None keep theirs).
        Returns the name, whether it was created now, and its search defaults."""
        name = _explicit_collection(name)
        if defaults and defaults.rrf_k is not None and not 1 <= defaults.rrf_k <= MAX_RRF_K:
            raise invalid_argument("RRF_K_OUT_OF_RANGE", f"default_rrf_k must be between 1 and {MAX_RRF_K}",
                                   field="default_rrf_k", rrf_k=defaults.rrf_k)
        created = await store_call(self.store.ensure_collection, name)
        current = await store_call(self.store.search_defaults, name)
        if defaults and (defaults.fusion or defaults.rrf_k):
            current = SearchDefaults(fusion=defaults.fusion or current.fusion, rrf_k=defaults.rrf_k or current.rrf_k)
            await store_call(self.store.set_search_defaults, name, current)
        return name, created, current

    async def delete_collection(self, name: str) -> tuple[str, int]:
        name = _explicit_collection(name)
        return name, await store_call(self.store.delete_collection, name)


def _explicit_collection(name: str) -> str:
    """Creating or deleting a collection needs its name spelled out (no implicit "default")."""
    if not name:
        raise invalid_argument("COLLECTION_NAME_INVALID", "the collection name is required", field="name")
    return validation.collection_name(name, field="name")


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise invalid_argument("PAYLOAD_TOO_LARGE", f"the document is {size} bytes; the limit is {limit}",
                               field="document", size_bytes=size, limit_bytes=limit)


def _default_doc_id(document: DocumentIn, content: _Content) -> str:
    """url -> the URL, path -> the path, text and uploads -> the first 32 hex digits of the content's sha256."""
    if document.url:
        return document.url
    if document.file is not None:
        if document.file.path:
            return document.file.path
        return hashlib.sha256(document.file.data).hexdigest()[:32]
    return hashlib.sha256(content.text.encode()).hexdigest()[:32]


def _first_heading(text: str) -> str:
    match = _HEADING.search(text)
    return match.group(1)[:300] if match else ""


def _point(index: int, chunk: Chunk, embedding: embedder_pb.Embedding, payload: Mapping[str, object]) -> ChunkPoint:
    doc_id = str(payload["doc_id"])
    return ChunkPoint(
        id=point_id(doc_id, index),
        dense=list(embedding.dense),
        sparse=Sparse(list(embedding.sparse.indices), list(embedding.sparse.values)),
        payload={**payload, "chunk_index": index, "text": chunk.text, "start": chunk.start,
                 "separator": chunk.separator},
    )


def _outcome(status: Literal["indexed", "unchanged"], doc_id: str, chunks: int, collection: str, title: str,
             content: _Content, content_hash: str) -> IngestOutcome:
    return IngestOutcome(status, doc_id, chunks, collection, title, content.mime_type, content.url, content_hash)
