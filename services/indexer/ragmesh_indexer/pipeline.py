"""Batch ingestion: many documents through convert -> chunk -> embed -> upsert, overlapped and batched.

    prepare (convert, hash, chunk; at most max_concurrent_documents at once across the process)
        -> ready documents (at most `lookahead_texts` chunks prepared and not yet written, per stream)
        -> batches of up to `batch_texts` chunks from many documents: one Embed call (or a few, when the
           embedder's max_batch_size is smaller), then one upsert per collection
        -> each document acknowledged once its chunks are in the store

While one batch is embedded, the next documents are converted and chunked, and up to `calls_in_flight`
batches are at the embedder at once, so the model never waits for the pipeline. A batch is sent when it is
full, when no more documents are coming, or when nothing of this stream is at the embedder and no document
became ready for `fill_wait` seconds (so a slow converter never leaves the model idle).

Every guarantee of a single ingest holds per document: its lock is held from the hash check until its chunks
are written, an unchanged document is skipped, a replaced one leaves no orphans, and a document that fails
(at any stage) fails alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
from opentelemetry import trace
from opentelemetry.trace import Tracer
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr
from ragmesh_store import ChunkPoint

from .chunking import TokenIds
from .metrics import IngestMetrics
from .model import DocumentIn, IngestOutcome, Prepared, Target

log = logging.getLogger(__name__)

# When a batch's Embed call is refused for one of these, its documents are embedded one by one, so only the
# document at fault fails (a text the embedder refuses; a batch too large for its queue).
_PER_DOCUMENT_RETRY = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)


@dataclass(frozen=True)
class PipelineLimits:
    """How a batch ingest is batched and bounded (see the module docstring)."""

    batch_texts: int = 256
    calls_in_flight: int = 2
    lookahead_texts: int = 1024
    fill_wait: float = 0.05


class Stages(Protocol):
    """What the pipeline runs each document through: `service.Indexer`, whose `ingest_stream` runs it."""

    limits: PipelineLimits
    tracer: Tracer
    metrics: IngestMetrics

    async def targets(self, collection: str) -> list[Target]: ...

    async def prepare(
        self, document: DocumentIn, locks: AsyncExitStack | None, target: Target | None = None
    ) -> Prepared | IngestOutcome: ...

    async def model_info(self, model: str = "") -> embedder_pb.GetModelInfoResponse: ...

    async def embed(
        self, texts: list[str], model: embedder_pb.GetModelInfoResponse, token_ids: Sequence[TokenIds] = ()
    ) -> list[tuple[list[float], embedder_pb.Embedding]]: ...

    def points(
        self, prepared: Prepared, embeddings: Sequence[tuple[list[float], embedder_pb.Embedding]]
    ) -> list[ChunkPoint]: ...

    async def write(self, target: Target, documents: Sequence[tuple[Prepared, list[ChunkPoint]]]) -> None: ...

    async def mirror(self, document: DocumentIn, targets: Sequence[Target]) -> None: ...


@dataclass(eq=False)
class _Doc:
    """One document on its way through the pipeline."""

    index: int
    document: DocumentIn
    span: trace.Span
    locks: AsyncExitStack = field(default_factory=AsyncExitStack)
    prepared: Prepared | None = None
    target: Target | None = None  # the version it is written to (the collection's active one when it started)

    @property
    def ready(self) -> Prepared:
        """What `prepare` made of it: set before the document joins the ready queue."""
        assert self.prepared is not None
        return self.prepared


class BatchPipeline:
    """One batch ingest (`Indexer.ingest_stream`): iterate `run()` for (index, outcome or error) events."""

    def __init__(self, indexer: Stages, documents: Sequence[DocumentIn]) -> None:
        self.indexer = indexer
        self.documents = documents
        self.limits = indexer.limits
        self._events: asyncio.Queue[tuple[int, IngestOutcome | RagmeshError]] = asyncio.Queue()
        self._changed = asyncio.Condition()
        self._ready: list[_Doc] = []
        self._ready_at = 0.0  # when the last document became ready
        self._preparing = 0
        self._all_started = False
        self._pending_texts = 0  # chunks prepared and not written yet
        self._in_flight = 0  # batches at the embedder or being written
        self._slots = asyncio.Semaphore(self.limits.calls_in_flight)
        self._unfinished: set[_Doc] = set()
        self._tasks: set[asyncio.Task] = set()

    async def run(self) -> AsyncIterator[tuple[int, IngestOutcome | RagmeshError]]:
        if not self.documents:
            return
        workers = [asyncio.create_task(self._start_all()), asyncio.create_task(self._batch_all())]
        try:
            for _ in range(len(self.documents)):
                yield await self._events.get()
        finally:
            for task in (*workers, *self._tasks):
                task.cancel()
            await asyncio.gather(*workers, *self._tasks, return_exceptions=True)
            for doc in list(self._unfinished):  # cancelled mid-way: release what is still held
                await doc.locks.aclose()
                doc.span.end()

    # --- prepare -------------------------------------------------------------------------------------------
    async def _start_all(self) -> None:
        """Start preparing each document in input order while the lookahead has room."""
        tracer = self.indexer.tracer
        for index, document in enumerate(self.documents):
            async with self._changed:
                await self._changed.wait_for(lambda: self._pending_texts < self.limits.lookahead_texts)
                self._preparing += 1
            span = tracer.start_span(
                "indexer.ingest_document",
                attributes={Attr.COLLECTION: document.collection or None, Attr.DOC_ID: document.doc_id or None},
            )
            doc = _Doc(index, document, span)
            self._unfinished.add(doc)
            self._spawn(self._prepare(doc))
        async with self._changed:
            self._all_started = True
            self._changed.notify_all()

    async def _prepare(self, doc: _Doc) -> None:
        try:
            with trace.use_span(doc.span, end_on_exit=False):
                doc.target = (await self.indexer.targets(doc.document.collection))[0]
                result = await self.indexer.prepare(doc.document, doc.locks, doc.target)
        except Exception as exc:  # noqa: BLE001 - the document fails alone
            await self._finish(doc, exc)
        else:
            if isinstance(result, Prepared):
                doc.prepared = result
            else:  # unchanged: nothing to embed
                await self._finish(doc, result)
        async with self._changed:
            self._preparing -= 1
            if doc.prepared is not None:
                self._ready.append(doc)
                self._ready_at = time.monotonic()
                self._pending_texts += len(doc.prepared.texts)
            self._changed.notify_all()

    # --- batch, embed, write -------------------------------------------------------------------------------
    async def _batch_all(self) -> None:
        while True:
            await self._slots.acquire()
            batch = await self._next_batch()
            if batch is None:
                self._slots.release()
                return
            self._spawn(self._embed_and_write(batch))

    async def _next_batch(self) -> list[_Doc] | None:
        """The next batch of ready documents, once it should go (None when every document is through)."""
        async with self._changed:
            while True:
                no_more = self._all_started and self._preparing == 0
                if not self._ready:
                    if no_more:
                        return None
                    await self._changed.wait()
                    continue
                texts = sum(len(d.ready.texts) for d in self._ready)
                quiet = time.monotonic() - self._ready_at
                if (
                    texts >= self.limits.batch_texts
                    or no_more
                    or (self._in_flight == 0 and quiet >= self.limits.fill_wait)
                ):
                    break
                timeout = self.limits.fill_wait - quiet if self._in_flight == 0 else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await self._changed.wait()
            batch: list[_Doc] = []
            count = 0
            while self._ready and (not batch or count + len(self._ready[0].ready.texts) <= self.limits.batch_texts):
                doc = self._ready.pop(0)
                batch.append(doc)
                count += len(doc.ready.texts)
            self._in_flight += 1
            return batch

    async def _embed_and_write(self, batch: list[_Doc]) -> None:
        try:
            await self._process(batch, split_on_refusal=len(batch) > 1)
        finally:
            async with self._changed:
                self._in_flight -= 1
                self._pending_texts -= sum(len(d.ready.texts) for d in batch)
                self._changed.notify_all()
            self._slots.release()

    async def _process(self, batch: list[_Doc], *, split_on_refusal: bool) -> None:
        by_model: dict[str, list[_Doc]] = {}
        for doc in batch:  # collections whose versions use other models are embedded apart
            by_model.setdefault(doc.ready.target.model, []).append(doc)
        for model_name, docs in by_model.items():
            await self._process_model(model_name, docs, split_on_refusal=split_on_refusal and len(docs) > 1)

    async def _process_model(self, model_name: str, batch: list[_Doc], *, split_on_refusal: bool) -> None:
        texts = [t for d in batch for t in d.ready.texts]
        token_ids = [ids for d in batch for ids in d.ready.token_ids]
        try:
            model = await self.indexer.model_info(model_name)
            embeddings = await self.indexer.embed(texts, model, token_ids)
        except RagmeshError as exc:
            if split_on_refusal and exc.code in _PER_DOCUMENT_RETRY:
                for doc in batch:
                    await self._process_model(model_name, [doc], split_on_refusal=False)
                return
            for doc in batch:
                await self._finish(doc, exc)
            return
        except Exception as exc:  # noqa: BLE001 - reported per document
            for doc in batch:
                await self._finish(doc, exc)
            return
        by_target: dict[str, list[tuple[_Doc, list]]] = {}
        start = 0
        for doc in batch:
            prepared = doc.ready
            points = self.indexer.points(prepared, embeddings[start : start + len(prepared.texts)])
            start += len(prepared.texts)
            by_target.setdefault(prepared.target.physical, []).append((doc, points))
        for documents in by_target.values():
            try:
                target = documents[0][0].ready.target
                await self.indexer.write(target, [(d.ready, points) for d, points in documents])
            except Exception as exc:  # noqa: BLE001 - this collection's documents fail, the others go on
                for doc, _ in documents:
                    await self._finish(doc, exc)
                continue
            for doc, _ in documents:
                await self._finish(doc, doc.ready.outcome)

    # --- results -------------------------------------------------------------------------------------------
    async def _finish(self, doc: _Doc, result: IngestOutcome | BaseException) -> None:
        """Release the document's lock, close its span, count it, and report it (acknowledge)."""
        if doc not in self._unfinished:
            return
        if doc.target is not None and not isinstance(result, BaseException):
            try:  # the collection's other versions get it too, before it is acknowledged
                with trace.use_span(doc.span, end_on_exit=False):
                    # Read again now, under the document's lock: a re-index that began (or a switch that happened)
                    # since the document started is seen, and its copy of this document is never older.
                    others = [
                        t
                        for t in await self.indexer.targets(doc.document.collection)
                        if t.physical != doc.target.physical
                    ]
                    await self.indexer.mirror(doc.document, others)
            except Exception as exc:  # noqa: BLE001 - the document fails (a retry writes what is missing)
                result = exc
        self._unfinished.discard(doc)
        await doc.locks.aclose()
        metrics = self.indexer.metrics
        if isinstance(result, BaseException):
            error = result if isinstance(result, RagmeshError) else _unexpected(result)
            doc.span.record_exception(result)
            doc.span.set_status(trace.StatusCode.ERROR, error.reason)
            metrics.documents.labels("failed").inc()
            outcome: IngestOutcome | RagmeshError = error
        else:
            doc.span.set_attributes(
                {
                    Attr.DOC_ID: result.doc_id,
                    Attr.COLLECTION: result.collection,
                    Attr.CHUNK_COUNT: result.chunks,
                    Attr.STATUS: result.status,
                }
            )
            metrics.documents.labels(result.status).inc()
            if result.status == "indexed":
                metrics.chunks.inc(result.chunks)
                with trace.use_span(doc.span, end_on_exit=False):
                    log.info("indexed %s/%s: %d chunks", result.collection, result.doc_id, result.chunks)
            outcome = result
        doc.span.end()
        self._events.put_nowait((doc.index, outcome))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _unexpected(exc: BaseException) -> RagmeshError:
    log.error("ingest failed unexpectedly", exc_info=exc)
    return RagmeshError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")
