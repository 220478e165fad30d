"""The ingestion pipeline: convert (files, URLs) -> hash -> chunk -> embed -> upsert -> drop old chunks.

No gRPC server code here: the servicer maps requests to `DocumentIn` and results to protos. Failures are
`RagmeshError`s; reasons from the converter and the embedder pass through unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

import grpc
from ragmesh.converter.v1 import converter_service_pb2 as converter_pb
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr, annotate, setup_telemetry
from ragmesh_common.threads import named_pool
from ragmesh_common.tokens import packed_ids
from ragmesh_common.vectors import dense_rows
from ragmesh_store import ChunkPoint, CollectionNotFound, SearchDefaults, Sparse, Store
from ragmesh_store.aio import store_call
from ragmesh_store.versions import IndexSettings, Version, Versions, read_versions

from .chunking import Chunk, Chunker, TokenIds
from .context import EmbedContext, context_fingerprint, embedded_text, heading_paths
from .files import decoded_verbatim, file_language, line_ranges, location_fields
from .metrics import IngestMetrics
from .model import DocumentIn, FileIn, IngestOutcome, Prepared, Target
from .pipeline import BatchPipeline, PipelineLimits

log = logging.getLogger(__name__)

# A chunk's point id is a 63-bit number in decimal, hashed from "<doc_id>:<chunk_index>": the same chunk always gets
# the same id. Numeric, because the engine hands a numeric id back as a plain int where a UUID (what chunks got
# before) costs a Python object and Python code at every read (see `ragmesh_store.engine_id`); 63 bits, so that it
# stays positive where 64-bit integers are signed. Two chunks of one collection share an id with probability
# ~n^2 / 2^64: 5e-8 for a million chunks.
_POINT_ID_PERSON = b"ragmesh-chunk"
_UPSERT_BATCH = 1024
# Documents up to this size are looked up and chunked on the event loop's thread with a store that holds the GIL
# (chunking is Python and tokenizer work that holds it too): ~0.1-0.3 ms for a passage, less than the hand-off to
# the chunk pool costs. Larger ones go to the pool, which lets the loop serve every GIL switch interval (5 ms)
# while they are chunked: 2,048 characters take ~2-6 ms (1-3 us per character on 2-core VMs).
INLINE_CHUNK_CHARS = 2048
# Bumped when what a file's chunks carry changes (verbatim text, lines, path), so re-syncs rewrite them once.
_LAYOUT_VERSION = 1
MAX_RRF_K = 10_000
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
Source = Literal["text", "upload", "path", "url"]
_SOURCES: dict[str, Source] = {s: s for s in get_args(Source)}


def point_id(doc_id: str, chunk_index: int) -> str:
    """The point id of a document's chunk."""
    digest = hashlib.blake2b(f"{doc_id}:{chunk_index}".encode(), digest_size=8, person=_POINT_ID_PERSON).digest()
    return str(int.from_bytes(digest, "big") >> 1)


@dataclass(frozen=True)
class _Content:
    text: str
    title: str
    source: Source
    filename: str = ""
    url: str = ""
    mime_type: str = ""
    path: str = ""
    language: str = ""  # set for files kept verbatim


class KeyedLocks:
    """One asyncio lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self.locks: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: tuple[str, str]) -> AsyncIterator[None]:
        lock, users = self.locks.get(key, (asyncio.Lock(), 0))
        self.locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self.locks[key]
            if users == 1:
                del self.locks[key]
            else:
                self.locks[key] = (lock, users - 1)


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
        limits: PipelineLimits | None = None,
        chunk_threads: int = 1,
        search: ServiceClient | None = None,
        embed_context: EmbedContext = "title+headings",
    ) -> None:
        """`chunker` chunks collections that were never re-indexed (their version 1 follows the configured
        chunking); `search` scores versions on golden sets when a re-index is gated; `embed_context` says whether
        chunks are embedded with their title and headings (see `context`)."""
        self.store = store
        self.search = search
        self.converter = converter
        self.embedder = embedder
        self.chunker = chunker
        self.embed_context = embed_context
        self.max_document_bytes = max_document_bytes
        # Documents being converted and chunked at once (across all requests); embedding is bounded apart.
        self._slots = asyncio.Semaphore(max_concurrent_documents)
        self.limits = limits or PipelineLimits()
        # Chunking is CPU work (Python and the tokenizer): its own small pool, so it neither queues the store
        # calls of the shared to_thread pool nor takes more cores from the model than `chunk_threads`.
        self._chunk_pool = named_pool(chunk_threads, "indexer-chunk")
        # The embedded store's calls hold the GIL: its quick reads (a collection's versions, a document's stored
        # hash) run on the event loop's thread, where a pool thread would add only a hand-off (two thread
        # wake-ups, ~0.2 CPU ms on a small VM) and the wait for the GIL. Writes keep their thread: an upsert gives
        # the GIL up many times while qdrant-edge converts its points' payloads, and the loop serves meanwhile (on
        # the loop's own thread a REST ingest measured the same: docs/decisions/inline-chunking.md).
        self._inline = bool(getattr(store, "holds_gil", False))
        telemetry = setup_telemetry("indexer")
        self.tracer = telemetry.tracer()
        self.metrics = telemetry.metrics(IngestMetrics)
        self.locks = KeyedLocks()
        self._models: dict[str, embedder_pb.GetModelInfoResponse] = {}
        self._model_lock = asyncio.Lock()
        self._chunkers: dict[tuple[int, int], Chunker] = {}

    # --- ingest ------------------------------------------------------------------------------------------
    async def ingest(self, document: DocumentIn) -> IngestOutcome:
        """Ingest one document; raises its RagmeshError when it fails (a batch of one, see `ingest_batch`)."""
        outcome = (await self.ingest_batch([document]))[0]
        if isinstance(outcome, RagmeshError):
            raise outcome
        return outcome

    async def ingest_batch(self, documents: Sequence[DocumentIn]) -> list[IngestOutcome | RagmeshError]:
        """Ingest many documents together; one result per document, in input order. A document that fails
        gets its RagmeshError in its slot and never fails the others."""
        results: list[IngestOutcome | RagmeshError | None] = [None] * len(documents)
        async for index, outcome in self.ingest_stream(documents):
            results[index] = outcome
        return [r if r is not None else _internal("the document was not processed") for r in results]

    def ingest_stream(self, documents: Sequence[DocumentIn]) -> AsyncIterator[tuple[int, IngestOutcome | RagmeshError]]:
        """Ingest many documents, yielding (input index, outcome or error) as each one is acknowledged (its
        chunks are in the store). Converting and chunking the next documents overlaps embedding the current
        ones, and the chunks of many documents go to the embedder in few large Embed calls (see pipeline)."""
        return BatchPipeline(self, documents).run()

    async def prepare(
        self,
        document: DocumentIn,
        locks: AsyncExitStack | None,
        target: Target | None = None,
    ) -> Prepared | IngestOutcome:
        """Validate, convert, hash and chunk one document for `target` (default: the collection's active
        version). Holds the document's lock (entered on `locks`, which the caller closes once the document is
        written; None: the caller holds it already); an unchanged document is answered here."""
        collection = validation.collection_name(document.collection, field="document.collection")
        if document.doc_id:
            validation.doc_id(document.doc_id, field="document.doc_id")
        target = target or (await self.targets(collection))[0]
        chunker = target.chunker
        async with self._slots:
            model = await self.model_info(target.model)
            # A file is hashed on its bytes, before any conversion: an unchanged file costs one read.
            file_hash = self._file_hash(document, model, chunker) if document.file is not None else None
            if file_hash is not None and document.file is not None:
                doc_id = document.doc_id or _file_doc_id(document.file)
                stored = await self._stored_document(target.physical, doc_id)
                if stored is not None and stored.get("content_hash") == file_hash:
                    return IngestOutcome(
                        "unchanged",
                        doc_id,
                        int(stored.get("chunk_count") or 0),
                        collection,
                        str(stored.get("title") or ""),
                        str(stored.get("mime_type") or ""),
                        str(stored.get("url") or ""),
                        file_hash,
                    )
            content = await self._content(document)
            if not content.text.strip():
                raise invalid_argument(Reason.EMPTY_DOCUMENT, "the document has no text to index", field="document")
            doc_id = document.doc_id or _default_doc_id(document, content)
            annotate({Attr.DOC_ID: doc_id})
            title = document.title or content.title or _first_heading(content.text)
            content_hash = file_hash or self._content_hash(content, title, document.metadata, model, chunker)
            if locks is not None:
                await locks.enter_async_context(self.locks.hold((collection, doc_id)))
            stored_hash, stored_chunks, chunks, texts, token_ids = await store_call(
                self._changed_chunks,
                target.physical,
                doc_id,
                content_hash,
                content,
                title,
                model,
                chunker,
                executor=self._chunk_pool,
                inline=self._inline and len(content.text) <= INLINE_CHUNK_CHARS,
            )
            if stored_hash == content_hash:
                return _outcome("unchanged", doc_id, stored_chunks, collection, title, content, content_hash)
            if not chunks:
                raise invalid_argument(Reason.EMPTY_DOCUMENT, "the document has no text to index", field="document")
            payload = {
                "doc_id": doc_id,
                "chunk_count": len(chunks),
                "title": title,
                "source": content.source,
                "filename": content.filename,
                "url": content.url,
                "mime_type": content.mime_type,
                "collection": collection,
                "content_hash": content_hash,
                "ingested_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "metadata": dict(document.metadata),
                **location_fields(content.path, content.language),
                **_datasource_fields(document),
            }
            outcome = _outcome("indexed", doc_id, len(chunks), collection, title, content, content_hash)
            end = max(c.start + len(c.text) for c in chunks)
            return Prepared(
                outcome,
                chunks,
                texts,
                token_ids,
                payload,
                replaces=stored_hash is not None,
                target=target,
                lines=line_ranges(content.text, chunks),
                tail=content.text[end:],
            )

    def _changed_chunks(
        self,
        physical: str,
        doc_id: str,
        content_hash: str,
        content: _Content,
        title: str,
        model: embedder_pb.GetModelInfoResponse,
        chunker: Chunker,
    ) -> tuple[str | None, int, list[Chunk], list[str], list[TokenIds]]:
        """(the stored copy's content hash, its chunk count, the new chunks, their embedded texts, and those texts'
        model tokens (see `_split`)): the stored count only when the stored copy has `content_hash` (unchanged:
        nothing to chunk), else the chunks. One trip off the event loop for the lookup and the chunking (blocking:
        run in the chunk pool)."""
        try:
            stored_hash = self.store.document_hash(physical, doc_id)
        except CollectionNotFound:  # written by its first document
            stored_hash = None
        if stored_hash == content_hash:
            return stored_hash, len(self.store.document_chunk_ids(physical, doc_id)), [], [], []
        return stored_hash, 0, *self._split(content, title, model, chunker)

    def _split(
        self,
        content: _Content,
        title: str,
        model: embedder_pb.GetModelInfoResponse,
        chunker: Chunker,
    ) -> tuple[list[Chunk], list[str], list[TokenIds]]:
        """The chunks, the texts they are embedded as, and those texts' model tokens when the model's tokenizer is
        the chunker's (the embedder then does not tokenise them again; else each is empty). Blocking: run in a
        thread."""
        chunks = chunker.split(content.text, max_sequence_length=model.max_sequence_length, filename=content.filename)
        paths = heading_paths(content.text, [c.start for c in chunks])
        embedded = [self._embedded_text(title, path, c, model, chunker) for c, path in zip(chunks, paths, strict=True)]
        return chunks, [text for text, _ in embedded], [ids for _, ids in embedded]

    def points(
        self,
        prepared: Prepared,
        embeddings: Sequence[tuple[list[float], embedder_pb.Embedding]],
    ) -> list[ChunkPoint]:
        """The document's chunk points with their vectors ((dense, embedding) per chunk, as `embed` returns
        them); the last one carries the text after it (`tail`), so the document is rebuilt byte for byte."""
        points = [
            _point(i, chunk, dense, embedding, prepared.payload, lines)
            for i, (chunk, (dense, embedding), lines) in enumerate(
                zip(prepared.chunks, embeddings, prepared.lines, strict=True)
            )
        ]
        points[-1] = _with_tail(points[-1], prepared.tail)
        return points

    async def write(self, target: Target, documents: Sequence[tuple[Prepared, list[ChunkPoint]]]) -> None:
        """Store the chunks of several documents of one version with one upsert (in pieces of at most
        _UPSERT_BATCH points), then delete the old chunks of the documents that replaced an older version.
        Version 1 (the collection's own name) is created by its first write; a later version exists from the
        start of its re-index (a write to one that was dropped meanwhile raises CollectionNotFound)."""
        if target.physical == target.collection:
            await store_call(self.store.ensure_collection, target.physical)
        points = [p for _, document_points in documents for p in document_points]
        for i in range(0, len(points), _UPSERT_BATCH):
            await store_call(self.store.upsert, target.physical, points[i : i + _UPSERT_BATCH])
        for prepared, document_points in documents:
            if prepared.replaces:
                await self._drop_stale(target.physical, prepared.outcome.doc_id, {p.id for p in document_points})

    async def write_to(self, document: DocumentIn, target: Target) -> IngestOutcome:
        """Ingest one document into one version, the caller holding the document's lock: a write to the
        versions beside the active one (a re-index's new version, the version kept for a rollback) and the
        re-index itself."""
        prepared = await self.prepare(document, None, target)
        if isinstance(prepared, IngestOutcome):
            return prepared
        embeddings = await self.embed(prepared.texts, await self.model_info(target.model), prepared.token_ids)
        await self.write(target, [(prepared, self.points(prepared, embeddings))])
        return prepared.outcome

    async def mirror(self, document: DocumentIn, targets: Sequence[Target]) -> None:
        """Write a document just acknowledged by the active version to the collection's other versions (the
        caller holds its lock). A version dropped meanwhile (a re-index rejected) is skipped."""
        for target in targets:
            with unless_gone():
                await self.write_to(document, target)

    # --- versions ------------------------------------------------------------------------------------------
    async def versions(self, collection: str) -> Versions:
        """The collection's versions (one implicit version 1 if it has no record or does not exist yet)."""
        try:
            return await store_call(read_versions, self.store, collection, inline=self._inline)
        except RagmeshError as exc:
            if exc.reason == Reason.COLLECTION_NOT_FOUND:
                return Versions(collection)
            raise

    async def targets(self, collection: str) -> list[Target]:
        """Where a write to the collection goes: its active version first, then the others that take writes."""
        collection = validation.collection_name(collection, field="document.collection")
        versions = await self.versions(collection)
        return [self.target(versions, v) for v in versions.written()]

    def target(self, versions: Versions, version: Version) -> Target:
        settings = version.settings
        chunker = (
            self.chunker if settings is None else self.chunker_for(settings.chunk_tokens, settings.chunk_overlap_tokens)
        )
        return Target(
            versions.name,
            version.version,
            versions.physical(version.version),
            chunker,
            settings.model if settings else "",
        )

    def chunker_for(self, chunk_tokens: int, overlap_tokens: int) -> Chunker:
        key = (chunk_tokens, overlap_tokens)
        if key == (self.chunker.chunk_tokens, self.chunker.overlap_tokens):
            return self.chunker
        if key not in self._chunkers:
            self._chunkers[key] = self.chunker.resized(chunk_tokens, overlap_tokens)
        return self._chunkers[key]

    async def settings_of(self, target: Target) -> IndexSettings:
        """What a version is built with, as its record keeps it."""
        model = await self.model_info(target.model)
        fingerprint = json.dumps(target.chunker.fingerprint(model.max_sequence_length), sort_keys=True)
        return IndexSettings(
            model=model.model,
            model_id=model.model_id,
            dimension=model.dimension,
            sparse_model_id=model.sparse_model_id,
            chunk_tokens=target.chunker.chunk_tokens,
            chunk_overlap_tokens=target.chunker.overlap_tokens,
            chunker_fingerprint=hashlib.sha256(fingerprint.encode()).hexdigest()[:16],
        )

    def close(self) -> None:
        self._chunk_pool.shutdown(wait=False, cancel_futures=True)

    async def model_info(self, model: str = "") -> embedder_pb.GetModelInfoResponse:
        """The embedder's info on a model ("": its default), asked once (and again after a failure)."""
        async with self._model_lock:
            if model not in self._models:
                info = await self.embedder.call("GetModelInfo", embedder_pb.GetModelInfoRequest(model=model))
                if info.dimension != self.store.dimension:
                    raise RagmeshError(
                        grpc.StatusCode.FAILED_PRECONDITION,
                        Reason.EMBEDDING_DIMENSION_MISMATCH,
                        f"the embedder's model {info.model_id!r} makes {info.dimension}-dimensional vectors but "
                        f"the store holds {self.store.dimension}-dimensional ones",
                        metadata={"model_dimension": str(info.dimension), "store_dimension": str(self.store.dimension)},
                    )
                self._models[model] = info
            return self._models[model]

    def _embedded_text(
        self, title: str, headings: list[str], chunk: Chunk, model: embedder_pb.GetModelInfoResponse, chunker: Chunker
    ) -> tuple[str, TokenIds]:
        """The chunk with its title/heading context (when `embed_context` asks for it), unless the context would
        push it past the model's window (the model would then drop the chunk's end): then the chunk alone. With
        its model tokens when the model's tokenizer is the chunker's, else none."""
        own = bool(model.tokenizer) and model.tokenizer == chunker.tokenizer
        text = embedded_text(title, headings, chunk.text) if self.embed_context == "title+headings" else chunk.text
        window = model.max_sequence_length
        if text == chunk.text:
            return text, chunk.token_ids if own else ()
        if not own and window <= 0:  # nothing to count the context against, and no tokens to send
            return text, ()
        ids = chunker.token_ids(text)
        if window > 0 and len(ids) > window:
            return chunk.text, chunk.token_ids if own else ()
        return text, ids if own else ()

    async def _content(self, document: DocumentIn) -> _Content:
        if document.stored is not None:
            stored = document.stored
            return _Content(
                stored.text,
                "",
                _SOURCES.get(stored.source, "text"),
                filename=stored.filename,
                url=stored.url,
                mime_type=stored.mime_type,
                path=stored.path,
                language=stored.language,
            )
        if document.text is not None:
            _check_size(len(document.text.encode()), self.max_document_bytes)
            return _Content(document.text, "", "text")
        if document.file is not None:
            file = document.file
            _check_size(len(file.data), self.max_document_bytes)
            name = file.path or file.filename
            text = decoded_verbatim(file.data, name)
            if text is not None:  # source code and plain text: stored as they are, titled by their path
                return _Content(
                    text,
                    name,
                    "path" if file.path else "upload",
                    filename=file.filename or name,
                    mime_type=file.mime_type or "text/plain",
                    path=file.path,
                    language=file_language(name),
                )
            request = converter_pb.ConvertRequest(content=file.data, filename=file.filename, mime_type=file.mime_type)
            source: Source = "path" if file.path else "upload"
        elif document.url:
            request = converter_pb.ConvertRequest(url=document.url)
            source = "url"
        else:
            raise invalid_argument(
                Reason.DOCUMENT_CONTENT_MISSING, "give the document's text, file or url", field="document.content"
            )
        converted = (await self.converter.call("Convert", request)).document
        path = document.file.path if document.file else ""
        return _Content(
            converted.markdown,
            converted.title or path,
            source,
            filename=converted.filename or (document.file.filename if document.file else ""),
            url=converted.url or (document.url or ""),
            mime_type=converted.mime_type,
            path=path,
        )

    def _file_hash(self, document: DocumentIn, model: embedder_pb.GetModelInfoResponse, chunker: Chunker) -> str:
        """A file's content hash, from its bytes and everything else that decides what is stored."""
        file = document.file
        assert file is not None
        basis = {
            "sha256": hashlib.sha256(file.data).hexdigest(),
            "filename": file.filename,
            "path": file.path,
            "mime_type": file.mime_type,
            "title": document.title,
            "metadata": dict(document.metadata),
            "datasource": _datasource_fields(document),
            "chunker": chunker.fingerprint(model.max_sequence_length, file.path or file.filename),
            "model": [model.model_id, model.sparse_model_id],
            "context": context_fingerprint(self.embed_context),
            "layout": _LAYOUT_VERSION,
        }
        return hashlib.sha256(json.dumps(basis, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    async def _stored_document(self, collection: str, doc_id: str) -> dict | None:
        """The stored document's first-chunk fields (hash, title, chunk count, ...), or None."""
        try:
            rows = await store_call(
                self.store.list_documents,
                collection,
                {"doc_id": doc_id},
                ["content_hash", "chunk_count", "title", "mime_type", "url"],
                inline=self._inline,
            )
        except RagmeshError as exc:
            if exc.reason == Reason.COLLECTION_NOT_FOUND:
                return None
            raise
        return rows[0] if rows else None

    def _content_hash(
        self,
        content: _Content,
        title: str,
        metadata: Mapping[str, object],
        model: embedder_pb.GetModelInfoResponse,
        chunker: Chunker,
    ) -> str:
        basis = {
            "text": content.text,
            "title": title,
            "metadata": dict(metadata),
            "chunker": chunker.fingerprint(model.max_sequence_length, content.filename),
            "model": [model.model_id, model.sparse_model_id],
            "context": context_fingerprint(self.embed_context),
        }
        return hashlib.sha256(json.dumps(basis, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    async def embed(
        self, texts: list[str], model: embedder_pb.GetModelInfoResponse, token_ids: Sequence[TokenIds] = ()
    ) -> list[tuple[list[float], embedder_pb.Embedding]]:
        """Dense and sparse vectors of the texts, in Embed calls of at most the embedder's max_batch_size texts,
        sent together: each text's dense vector (sent packed) and its embedding. `token_ids` (each text's model
        tokens, from the model's own tokenizer) go with a call whose texts all have theirs."""
        size = model.max_batch_size if model.max_batch_size > 0 else len(texts)
        kinds = [embedder_pb.VECTOR_KIND_DENSE, embedder_pb.VECTOR_KIND_SPARSE]

        def request(part: slice) -> embedder_pb.EmbedRequest:
            ids = token_ids[part]
            tokens = (
                embedder_pb.TokenIds(tokenizer=model.tokenizer, ids=packed_ids(ids), lengths=list(map(len, ids)))
                if ids and all(map(len, ids))
                else None
            )
            return embedder_pb.EmbedRequest(
                texts=texts[part],
                input_type=embedder_pb.INPUT_TYPE_DOCUMENT,
                kinds=kinds,
                dense_format=embedder_pb.DENSE_FORMAT_PACKED_FLOAT32,
                model=model.model,
                token_ids=tokens,
            )

        calls: list[Awaitable[embedder_pb.EmbedResponse]] = [
            self.embedder.call("Embed", request(slice(i, i + size))) for i in range(0, len(texts), size)
        ]
        # Every call is awaited before one's refusal is raised: the caller's fallback (one document at a time)
        # must not find the embedder's queue still full of this batch's own texts.
        responses = await asyncio.gather(*calls, return_exceptions=True)
        replies: list[embedder_pb.EmbedResponse] = []
        for response in responses:
            if isinstance(response, BaseException):
                raise response
            replies.append(response)
        embeddings = [pair for reply in replies for pair in zip(dense_rows(reply), reply.embeddings, strict=True)]
        if len(embeddings) != len(texts):
            raise RagmeshError(
                grpc.StatusCode.INTERNAL,
                Reason.EMBEDDING_COUNT_MISMATCH,
                f"the embedder returned {len(embeddings)} embeddings for {len(texts)} chunks",
            )
        truncated = sum(e.truncated for _, e in embeddings)
        if truncated:
            log.warning("the embedder truncated %d of %d chunks", truncated, len(texts))
        return embeddings

    async def _drop_stale(self, collection: str, doc_id: str, new_ids: set[str]) -> None:
        """Delete the document's chunks that the new version did not overwrite (no orphans)."""
        stale = [i for i in await store_call(self.store.document_chunk_ids, collection, doc_id) if i not in new_ids]
        if stale:
            await store_call(self.store.delete_points, collection, stale)

    # --- deletes and collections -------------------------------------------------------------------------
    async def delete_document(self, collection: str, doc_id: str) -> int:
        collection = validation.collection_name(collection)
        if not doc_id:
            raise invalid_argument(Reason.DOCUMENT_ID_INVALID, "doc_id is required", field="doc_id")
        validation.doc_id(doc_id)
        async with self.locks.hold((collection, doc_id)):
            active, *others = await self.targets(collection)
            deleted = await store_call(self.store.delete_document, active.physical, doc_id)
            for target in others:  # every version forgets it, so neither a switch nor a rollback brings it back
                with unless_gone():
                    await store_call(self.store.delete_document, target.physical, doc_id)
        if deleted == 0:
            raise not_found(
                Reason.DOCUMENT_NOT_FOUND,
                f"document {doc_id!r} is not in collection {collection!r}",
                collection=collection,
                doc_id=doc_id,
            )
        return deleted

    async def create_collection(
        self,
        name: str,
        defaults: SearchDefaults | None = None,
    ) -> tuple[str, bool, SearchDefaults]:
        """Create the collection if missing; store the given search defaults (fields left None keep theirs).
        Returns the name, whether it was created now, and its search defaults."""
        name = _explicit_collection(name)
        if defaults and defaults.rrf_k is not None and not 1 <= defaults.rrf_k <= MAX_RRF_K:
            raise invalid_argument(
                Reason.RRF_K_OUT_OF_RANGE,
                f"default_rrf_k must be between 1 and {MAX_RRF_K}",
                field="default_rrf_k",
                rrf_k=defaults.rrf_k,
            )
        created = await store_call(self.store.ensure_collection, name)
        current = await store_call(self.store.search_defaults, name)
        if defaults and (defaults.fusion or defaults.rrf_k):
            current = SearchDefaults(fusion=defaults.fusion or current.fusion, rrf_k=defaults.rrf_k or current.rrf_k)
            await store_call(self.store.set_search_defaults, name, current)
        return name, created, current

    async def delete_collection(self, name: str) -> tuple[str, int]:
        """Delete the collection: every version of it (the active one's chunks are counted)."""
        name = _explicit_collection(name)
        versions = await self.versions(name)
        deleted = 0
        for version in versions.versions:
            if version.version == 1:
                continue
            with unless_gone():
                chunks = await store_call(self.store.delete_collection, versions.physical(version.version))
                deleted = chunks if version.version == versions.active else deleted
        chunks = await store_call(self.store.delete_collection, name)
        return name, chunks if versions.active == 1 else deleted


@contextlib.contextmanager
def unless_gone() -> Iterator[None]:
    """Go on when the store collection is gone (a version dropped meanwhile)."""
    try:
        yield
    except RagmeshError as exc:
        if exc.reason != Reason.COLLECTION_NOT_FOUND:
            raise


def _explicit_collection(name: str) -> str:
    """Creating or deleting a collection needs its name spelled out (no implicit "default")."""
    if not name:
        raise invalid_argument(Reason.COLLECTION_NAME_INVALID, "the collection name is required", field="name")
    return validation.collection_name(name, field="name")


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise invalid_argument(
            Reason.PAYLOAD_TOO_LARGE,
            f"the document is {size} bytes; the limit is {limit}",
            field="document",
            size_bytes=size,
            limit_bytes=limit,
        )


def _file_doc_id(file: FileIn) -> str:
    return file.path or hashlib.sha256(file.data).hexdigest()[:32]


def _datasource_fields(document: DocumentIn) -> dict[str, str]:
    return {k: v for k, v in (("datasource", document.datasource), ("fresh_until", document.fresh_until)) if v}


def _default_doc_id(document: DocumentIn, content: _Content) -> str:
    """url -> the URL, path -> the path, text and uploads -> the first 32 hex digits of the content's sha256."""
    if document.url:
        return document.url
    if document.file is not None:
        return _file_doc_id(document.file)
    return hashlib.sha256(content.text.encode()).hexdigest()[:32]


def _first_heading(text: str) -> str:
    match = _HEADING.search(text)
    return match.group(1)[:300] if match else ""


def _point(
    index: int,
    chunk: Chunk,
    dense: list[float],
    embedding: embedder_pb.Embedding,
    payload: Mapping[str, object],
    lines: tuple[int, int],
) -> ChunkPoint:
    doc_id = str(payload["doc_id"])
    return ChunkPoint(
        id=point_id(doc_id, index),
        dense=dense,
        sparse=Sparse(list(embedding.sparse.indices), list(embedding.sparse.values)),
        payload={
            **payload,
            "chunk_index": index,
            "text": chunk.text,
            "start": chunk.start,
            "separator": chunk.separator,
            "start_line": lines[0],
            "end_line": lines[1],
        },
    )


def _with_tail(point: ChunkPoint, tail: str) -> ChunkPoint:
    return ChunkPoint(point.id, point.dense, point.sparse, {**point.payload, "tail": tail}) if tail else point


def _internal(message: str) -> RagmeshError:
    return RagmeshError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, message)


def _outcome(
    status: Literal["indexed", "unchanged"],
    doc_id: str,
    chunks: int,
    collection: str,
    title: str,
    content: _Content,
    content_hash: str,
) -> IngestOutcome:
    return IngestOutcome(status, doc_id, chunks, collection, title, content.mime_type, content.url, content_hash)
