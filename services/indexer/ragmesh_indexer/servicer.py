"""gRPC IndexerService: maps requests to the domain (`service.Indexer`) and results back to protos."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError
from ragmesh_common.telemetry import Attr, annotate, setup_telemetry
from ragmesh_store import SearchDefaults

from .metrics import IngestMetrics
from .service import DocumentIn, FileIn, Indexer, IngestOutcome

log = logging.getLogger(__name__)
DOMAIN = "indexer.ragmesh"
_STATUS = {"indexed": pb.INGEST_STATUS_INDEXED, "unchanged": pb.INGEST_STATUS_UNCHANGED}


def _document(message: pb.DocumentInput) -> DocumentIn:
    content = message.WhichOneof("content")
    file = message.file
    return DocumentIn(
        collection=message.collection,
        doc_id=message.doc_id,
        title=message.title,
        metadata=validation.flat_metadata(message.metadata, field="document.metadata"),
        text=message.text if content == "text" else None,
        file=FileIn(file.data, file.filename, file.mime_type, file.path) if content == "file" else None,
        url=message.url if content == "url" else None,
    )


def _result(outcome: IngestOutcome) -> pb.IngestResult:
    return pb.IngestResult(
        status=_STATUS[outcome.status], doc_id=outcome.doc_id, chunks=outcome.chunks, collection=outcome.collection,
        title=outcome.title, mime_type=outcome.mime_type, url=outcome.url, content_hash=outcome.content_hash,
    )


def _error(exc: Exception) -> pb.IngestError:
    if not isinstance(exc, RagmeshError):
        log.error("ingest failed unexpectedly", exc_info=exc)
        exc = RagmeshError(grpc.StatusCode.INTERNAL, "INTERNAL_ERROR", f"internal error: {type(exc).__name__}")
    exc.with_domain(DOMAIN)
    return pb.IngestError(code=exc.code.name, reason=exc.reason, domain=exc.domain, message=exc.message,
                          metadata=dict(exc.metadata))


class IndexerServicer(pb_grpc.IndexerServiceServicer):
    def __init__(self, indexer: Indexer) -> None:
        self.indexer = indexer
        telemetry = setup_telemetry("indexer")
        self.tracer = telemetry.tracer()
        self.metrics = telemetry.metrics(IngestMetrics)

    async def _ingest(self, message: pb.DocumentInput) -> IngestOutcome:
        """One document, in a span of its own (a batch carries several) and counted in the metrics."""
        attributes = {Attr.COLLECTION: message.collection, Attr.DOC_ID: message.doc_id or None}
        with self.tracer.start_as_current_span("indexer.ingest_document") as span:
            annotate(attributes)
            try:
                outcome = await self.indexer.ingest(_document(message))
            except Exception:
                self.metrics.documents.labels("failed").inc()
                raise
            span.set_attributes({Attr.DOC_ID: outcome.doc_id, Attr.COLLECTION: outcome.collection,
                                 Attr.CHUNK_COUNT: outcome.chunks, Attr.STATUS: outcome.status})
        self.metrics.documents.labels(outcome.status).inc()
        if outcome.status == "indexed":
            self.metrics.chunks.inc(outcome.chunks)
        return outcome

    async def IngestDocument(self, request: pb.IngestDocumentRequest, context) -> pb.IngestDocumentResponse:
        return pb.IngestDocumentResponse(result=_result(await self._ingest(request.document)))

    async def IngestDocuments(
        self, request: pb.IngestDocumentsRequest, context
    ) -> AsyncIterator[pb.IngestDocumentsResponse]:
        total = len(request.documents)

        async def one(index: int, message: pb.DocumentInput) -> pb.IngestDocumentsResponse:
            try:
                result = _result(await self._ingest(message))
                return pb.IngestDocumentsResponse(index=index, result=result)
            except Exception as exc:  # noqa: BLE001 - one failed document must not stop the others
                failed = pb.IngestResult(status=pb.INGEST_STATUS_FAILED, doc_id=message.doc_id,
                                         collection=message.collection)
                return pb.IngestDocumentsResponse(index=index, result=failed, error=_error(exc))

        # Every document gets a task; the indexer's semaphore bounds how many run at once.
        tasks = [asyncio.create_task(one(i, d)) for i, d in enumerate(request.documents)]
        try:
            for completed, finished in enumerate(asyncio.as_completed(tasks), start=1):
                event = await finished
                event.completed, event.total = completed, total
                yield event
        finally:
            for task in tasks:
                task.cancel()

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context) -> pb.DeleteDocumentResponse:
        return pb.DeleteDocumentResponse(
            deleted_chunks=await self.indexer.delete_document(request.collection, request.doc_id)
        )

    async def CreateCollection(self, request: pb.CreateCollectionRequest, context) -> pb.CreateCollectionResponse:
        fusion = search_pb.Fusion.Name(request.default_fusion).removeprefix("FUSION_").lower()
        defaults = SearchDefaults(fusion=fusion if request.default_fusion else None,  # type: ignore[arg-type]
                                  rrf_k=request.default_rrf_k if request.HasField("default_rrf_k") else None)
        name, created, current = await self.indexer.create_collection(request.name, defaults)
        return pb.CreateCollectionResponse(
            name=name, created=created,
            default_fusion=search_pb.Fusion.Value(f"FUSION_{current.fusion.upper()}") if current.fusion else 0,
            default_rrf_k=current.rrf_k or 0,
        )

    async def DeleteCollection(self, request: pb.DeleteCollectionRequest, context) -> pb.DeleteCollectionResponse:
        name, deleted = await self.indexer.delete_collection(request.name)
        return pb.DeleteCollectionResponse(name=name, deleted_chunks=deleted)
