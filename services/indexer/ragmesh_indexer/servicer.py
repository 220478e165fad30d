"""gRPC IndexerService: maps requests to the domain (`service.Indexer`) and results back to protos."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from google.protobuf import json_format
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError
from ragmesh_store import SearchDefaults

from .jobs import Jobs, JobSource, rates
from .model import DatasourceRecord, DocumentIn, FileIn, IngestOutcome, JobRecord
from .reindex import ReindexOptions
from .service import Indexer

log = logging.getLogger(__name__)
DOMAIN = "indexer.ragmesh"
_STATUS = {"indexed": pb.INGEST_STATUS_INDEXED, "unchanged": pb.INGEST_STATUS_UNCHANGED}
_JOB_STATES = {
    "queued": pb.JOB_STATE_QUEUED,
    "running": pb.JOB_STATE_RUNNING,
    "done": pb.JOB_STATE_DONE,
    "failed": pb.JOB_STATE_FAILED,
    "cancelled": pb.JOB_STATE_CANCELLED,
    "rejected": pb.JOB_STATE_REJECTED,
}


def job_message(job: JobRecord, *, details: bool = True) -> pb.Job:
    """A job record (jobs.Jobs) as the Job message; without `details`, no errors or skipped files."""
    per_second, bytes_per_second = rates(job)
    message = pb.Job(
        job_id=job["job_id"],
        collection=job["collection"],
        state=_JOB_STATES.get(job["state"], pb.JOB_STATE_UNSPECIFIED),
        kind=job.get("kind", ""),
        source=job.get("source", ""),
        total=job.get("total", 0),
        indexed=job.get("indexed", 0),
        unchanged=job.get("unchanged", 0),
        failed=job.get("failed", 0),
        skipped=job.get("skipped", 0),
        deleted=job.get("deleted", 0),
        bytes=job.get("bytes", 0),
        created_at=job.get("created_at", ""),
        started_at=job.get("started_at", ""),
        finished_at=job.get("finished_at", ""),
        documents_per_second=per_second,
        bytes_per_second=bytes_per_second,
        datasource_id=job.get("datasource_id", ""),
        error=job.get("error", ""),
        prune=job.get("prune", False),
    )
    if job.get("reindex"):
        json_format.ParseDict(dict(job["reindex"]), message.reindex, ignore_unknown_fields=True)
    if details:
        message.errors.extend(
            pb.JobDocumentError(document=e["document"], error=pb.IngestError(**e["error"]))
            for e in job.get("errors", [])
        )
        message.skipped_files.extend(pb.SkippedFile(path=p, reason=r) for p, r in job.get("skipped_files", []))
    return message


def _datasource(ds: DatasourceRecord) -> pb.Datasource:
    return pb.Datasource(
        datasource_id=ds["datasource_id"],
        collection=ds["collection"],
        kind=ds["kind"],
        folder=ds.get("folder", ""),
        urls=ds.get("urls", []),
        prune=ds.get("prune", False),
        fresh_for_seconds=ds.get("fresh_for_seconds", 0),
        fresh_until=ds.get("fresh_until", ""),
        last_job_id=ds.get("last_job_id", ""),
        last_synced_at=ds.get("last_synced_at", ""),
        due=ds.get("due", False),
    )


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
        datasource=message.datasource_id,
        fresh_until=message.fresh_until,
    )


def _result(outcome: IngestOutcome) -> pb.IngestResult:
    return pb.IngestResult(
        status=_STATUS[outcome.status],
        doc_id=outcome.doc_id,
        chunks=outcome.chunks,
        collection=outcome.collection,
        title=outcome.title,
        mime_type=outcome.mime_type,
        url=outcome.url,
        content_hash=outcome.content_hash,
    )


def _error(exc: Exception) -> pb.IngestError:
    if not isinstance(exc, RagmeshError):
        log.error("ingest failed unexpectedly", exc_info=exc)
        exc = RagmeshError(grpc.StatusCode.INTERNAL, "INTERNAL_ERROR", f"internal error: {type(exc).__name__}")
    exc.with_domain(DOMAIN)
    return pb.IngestError(
        code=exc.code.name, reason=exc.reason, domain=exc.domain, message=exc.message, metadata=dict(exc.metadata)
    )


class IndexerServicer(pb_grpc.IndexerServiceServicer):
    def __init__(self, indexer: Indexer, jobs: Jobs | None = None) -> None:
        self.indexer = indexer
        self.jobs = jobs

    async def IngestDocument(self, request: pb.IngestDocumentRequest, context: object) -> pb.IngestDocumentResponse:
        return pb.IngestDocumentResponse(result=_result(await self.indexer.ingest(_document(request.document))))

    async def IngestDocuments(
        self, request: pb.IngestDocumentsRequest, context: object
    ) -> AsyncIterator[pb.IngestDocumentsResponse]:
        """One event per document as it is acknowledged; the documents are embedded and written in batches."""
        total = len(request.documents)
        documents: list[DocumentIn | None] = []
        refused: list[tuple[int, Exception]] = []
        for index, message in enumerate(request.documents):
            try:
                documents.append(_document(message))
            except RagmeshError as exc:  # bad metadata: this document fails, the others go on
                self.indexer.metrics.documents.labels("failed").inc()
                documents.append(None)
                refused.append((index, exc))
        accepted = [i for i, d in enumerate(documents) if d is not None]
        completed = 0

        def event(index: int, outcome: IngestOutcome | Exception) -> pb.IngestDocumentsResponse:
            nonlocal completed
            completed += 1
            if isinstance(outcome, Exception):
                message = request.documents[index]
                failed = pb.IngestResult(
                    status=pb.INGEST_STATUS_FAILED, doc_id=message.doc_id, collection=message.collection
                )
                return pb.IngestDocumentsResponse(
                    index=index, result=failed, error=_error(outcome), completed=completed, total=total
                )
            return pb.IngestDocumentsResponse(index=index, result=_result(outcome), completed=completed, total=total)

        for index, error in refused:
            yield event(index, error)
        async for position, outcome in self.indexer.ingest_stream([d for d in documents if d is not None]):
            yield event(accepted[position], outcome)

    async def DeleteDocument(self, request: pb.DeleteDocumentRequest, context: object) -> pb.DeleteDocumentResponse:
        return pb.DeleteDocumentResponse(
            deleted_chunks=await self.indexer.delete_document(request.collection, request.doc_id)
        )

    async def CreateCollection(
        self, request: pb.CreateCollectionRequest, context: object
    ) -> pb.CreateCollectionResponse:
        fusion = search_pb.Fusion.Name(request.default_fusion).removeprefix("FUSION_").lower()
        defaults = SearchDefaults(
            fusion=fusion if request.default_fusion else None,  # type: ignore[arg-type]
            rrf_k=request.default_rrf_k if request.HasField("default_rrf_k") else None,
        )
        name, created, current = await self.indexer.create_collection(request.name, defaults)
        return pb.CreateCollectionResponse(
            name=name,
            created=created,
            default_fusion=f"FUSION_{current.fusion.upper()}" if current.fusion else search_pb.FUSION_UNSPECIFIED,
            default_rrf_k=current.rrf_k or 0,
        )

    async def DeleteCollection(
        self, request: pb.DeleteCollectionRequest, context: object
    ) -> pb.DeleteCollectionResponse:
        name, deleted = await self.indexer.delete_collection(request.name)
        return pb.DeleteCollectionResponse(name=name, deleted_chunks=deleted)

    # --- jobs ----------------------------------------------------------------------------------------------
    def _jobs(self) -> Jobs:
        if self.jobs is None:
            raise RagmeshError(grpc.StatusCode.UNIMPLEMENTED, "JOBS_DISABLED", "this indexer runs no jobs")
        return self.jobs

    async def CreateJob(self, request: pb.CreateJobRequest, context: object) -> pb.CreateJobResponse:
        which = request.WhichOneof("source")
        if which == "urls":
            source = JobSource(urls=list(request.urls.urls))
        elif which == "documents":
            source = JobSource(documents=[_document(d) for d in request.documents.documents])
        elif which == "archive":
            source = JobSource(archive=request.archive.data, archive_name=request.archive.filename)
        elif which == "folder":
            source = JobSource(folder=request.folder)
        else:
            source = JobSource()
        job = await self._jobs().create(
            request.collection, source, prune=request.prune, fresh_for_seconds=request.fresh_for_seconds
        )
        return pb.CreateJobResponse(job=job_message(job))

    async def GetJob(self, request: pb.GetJobRequest, context: object) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=job_message(await self._jobs().get(request.job_id)))

    async def ListJobs(self, request: pb.ListJobsRequest, context: object) -> pb.ListJobsResponse:
        jobs = await self._jobs().list(request.limit)
        return pb.ListJobsResponse(jobs=[job_message(j, details=False) for j in jobs])

    async def CancelJob(self, request: pb.CancelJobRequest, context: object) -> pb.CancelJobResponse:
        return pb.CancelJobResponse(job=job_message(await self._jobs().cancel(request.job_id)))

    async def ListDatasources(self, request: pb.ListDatasourcesRequest, context: object) -> pb.ListDatasourcesResponse:
        datasources = await self._jobs().datasources(request.collection)
        return pb.ListDatasourcesResponse(datasources=[_datasource(d) for d in datasources])

    async def SyncDatasources(self, request: pb.SyncDatasourcesRequest, context: object) -> pb.SyncDatasourcesResponse:
        jobs = await self._jobs().sync(request.collection, everything=request.all)
        return pb.SyncDatasourcesResponse(jobs=[job_message(j, details=False) for j in jobs])

    async def ListExpiredDocuments(
        self, request: pb.ListExpiredDocumentsRequest, context: object
    ) -> pb.ListExpiredDocumentsResponse:
        rows = await self._jobs().expired(request.collection)
        return pb.ListExpiredDocumentsResponse(
            documents=[
                pb.ExpiredDocument(
                    doc_id=r["doc_id"], fresh_until=r["fresh_until"], datasource_id=r["datasource"] or ""
                )
                for r in rows
            ]
        )

    async def PruneExpiredDocuments(
        self, request: pb.PruneExpiredDocumentsRequest, context: object
    ) -> pb.PruneExpiredDocumentsResponse:
        return pb.PruneExpiredDocumentsResponse(doc_ids=await self._jobs().prune_expired(request.collection))

    # --- versions ------------------------------------------------------------------------------------------
    async def ReindexCollection(
        self, request: pb.ReindexCollectionRequest, context: object
    ) -> pb.ReindexCollectionResponse:
        options = ReindexOptions(
            chunk_tokens=request.chunk_tokens if request.HasField("chunk_tokens") else None,
            chunk_overlap_tokens=(request.chunk_overlap_tokens if request.HasField("chunk_overlap_tokens") else None),
            model=request.model,
            tolerance=request.tolerance if request.HasField("tolerance") else None,
            force=request.force,
            retention_seconds=request.retention_seconds if request.HasField("retention_seconds") else None,
        )
        job = await self._jobs().reindex(request.collection, options)
        return pb.ReindexCollectionResponse(job=job_message(job))

    async def RollbackCollection(
        self, request: pb.RollbackCollectionRequest, context: object
    ) -> pb.RollbackCollectionResponse:
        collection = validation.collection_name(request.collection)
        version, replaced = await self._jobs().reindexer.rollback(collection)
        return pb.RollbackCollectionResponse(collection=collection, version=version, replaced_version=replaced)
