"""gRPC IndexerService: each RPC maps its request with `conversions`, calls the domain (`service.Indexer`, `jobs.Jobs`)
and maps the result back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason

from . import conversions
from .conversions import DOMAIN
from .entities import build
from .entity_files import read
from .entity_ingest import EntityIngest, graph_disabled, max_property_chars
from .jobs import Jobs
from .model import DocumentIn, IngestOutcome
from .service import Indexer

__all__ = ["DOMAIN", "IndexerServicer"]


class IndexerServicer(pb_grpc.IndexerServiceServicer):
    def __init__(self, indexer: Indexer, jobs: Jobs | None = None, entities: EntityIngest | None = None) -> None:
        self.indexer = indexer
        self.jobs = jobs
        self.entities = entities  # None: the graph feature is off

    async def IngestDocument(self, request: pb.IngestDocumentRequest, context: object) -> pb.IngestDocumentResponse:
        return pb.IngestDocumentResponse(
            result=conversions.result(await self.indexer.ingest(conversions.document(request.document)))
        )

    async def IngestDocuments(
        self, request: pb.IngestDocumentsRequest, context: object
    ) -> AsyncIterator[pb.IngestDocumentsResponse]:
        """One event per document as it is acknowledged; the documents are embedded and written in batches."""
        total = len(request.documents)
        documents: list[DocumentIn | None] = []
        refused: list[tuple[int, Exception]] = []
        for index, message in enumerate(request.documents):
            try:
                documents.append(conversions.document(message))
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
                    index=index, result=failed, error=conversions.error(outcome), completed=completed, total=total
                )
            return pb.IngestDocumentsResponse(
                index=index, result=conversions.result(outcome), completed=completed, total=total
            )

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
        name, created, current = await self.indexer.create_collection(
            request.name, conversions.search_defaults(request)
        )
        return conversions.created_collection(name, created, current)

    async def DeleteCollection(
        self, request: pb.DeleteCollectionRequest, context: object
    ) -> pb.DeleteCollectionResponse:
        name, deleted = await self.indexer.delete_collection(request.name)
        return pb.DeleteCollectionResponse(name=name, deleted_chunks=deleted)

    # --- jobs ----------------------------------------------------------------------------------------------
    def _jobs(self) -> Jobs:
        if self.jobs is None:
            raise RagmeshError(grpc.StatusCode.UNIMPLEMENTED, Reason.JOBS_DISABLED, "this indexer runs no jobs")
        return self.jobs

    async def CreateJob(self, request: pb.CreateJobRequest, context: object) -> pb.CreateJobResponse:
        source = conversions.job_source(request)
        job = await self._jobs().create(
            request.collection, source, prune=request.prune, fresh_for_seconds=request.fresh_for_seconds
        )
        return pb.CreateJobResponse(job=conversions.job_message(job))

    async def GetJob(self, request: pb.GetJobRequest, context: object) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=conversions.job_message(await self._jobs().get(request.job_id)))

    async def ListJobs(self, request: pb.ListJobsRequest, context: object) -> pb.ListJobsResponse:
        jobs = await self._jobs().list(request.limit)
        return pb.ListJobsResponse(jobs=[conversions.job_message(j, details=False) for j in jobs])

    async def CancelJob(self, request: pb.CancelJobRequest, context: object) -> pb.CancelJobResponse:
        return pb.CancelJobResponse(job=conversions.job_message(await self._jobs().cancel(request.job_id)))

    async def ListDatasources(self, request: pb.ListDatasourcesRequest, context: object) -> pb.ListDatasourcesResponse:
        datasources = await self._jobs().datasources(request.collection)
        return pb.ListDatasourcesResponse(datasources=[conversions.datasource(d) for d in datasources])

    async def PlanUpload(self, request: pb.PlanUploadRequest, context: object) -> pb.PlanUploadResponse:
        ds, plan = await self._jobs().plan_upload(
            request.collection, conversions.manifest(request.manifest), prune=request.prune
        )
        return conversions.planned_upload(ds, plan)

    async def SyncDatasources(self, request: pb.SyncDatasourcesRequest, context: object) -> pb.SyncDatasourcesResponse:
        jobs = await self._jobs().sync(request.collection, everything=request.all)
        return pb.SyncDatasourcesResponse(jobs=[conversions.job_message(j, details=False) for j in jobs])

    async def ListExpiredDocuments(
        self, request: pb.ListExpiredDocumentsRequest, context: object
    ) -> pb.ListExpiredDocumentsResponse:
        rows = await self._jobs().expired(request.collection)
        return pb.ListExpiredDocumentsResponse(documents=[conversions.expired_document(r) for r in rows])

    async def PruneExpiredDocuments(
        self, request: pb.PruneExpiredDocumentsRequest, context: object
    ) -> pb.PruneExpiredDocumentsResponse:
        return pb.PruneExpiredDocumentsResponse(doc_ids=await self._jobs().prune_expired(request.collection))

    # --- versions ------------------------------------------------------------------------------------------
    async def ReindexCollection(
        self, request: pb.ReindexCollectionRequest, context: object
    ) -> pb.ReindexCollectionResponse:
        job = await self._jobs().reindex(request.collection, conversions.reindex_options(request))
        return pb.ReindexCollectionResponse(job=conversions.job_message(job))

    async def RollbackCollection(
        self, request: pb.RollbackCollectionRequest, context: object
    ) -> pb.RollbackCollectionResponse:
        collection = validation.collection_name(request.collection)
        version, replaced = await self._jobs().reindexer.rollback(collection)
        return pb.RollbackCollectionResponse(collection=collection, version=version, replaced_version=replaced)

    # --- graph entities ------------------------------------------------------------------------------------
    async def IngestEntities(self, request: pb.IngestEntitiesRequest, context: object) -> pb.IngestEntitiesResponse:
        entities = self._entities()
        limit = max_property_chars(request.max_property_chars)
        given = [
            entity
            for i, message in enumerate(request.entities)
            for entity in build(conversions.entity_input(message), field=f"entities[{i}]", max_property_chars=limit)
        ]
        files = [conversions.entity_file(f) for f in request.files]
        from_files = await asyncio.to_thread(read, files, max_property_chars=limit) if files else []
        report = await entities.ingest(request.collection, [*given, *from_files])
        return conversions.ingested_entities(report)

    async def DeleteEntities(self, request: pb.DeleteEntitiesRequest, context: object) -> pb.DeleteEntitiesResponse:
        deleted = await self._entities().delete(request.collection, list(request.ids))
        return pb.DeleteEntitiesResponse(deleted_ids=deleted)

    def _entities(self) -> EntityIngest:
        if self.entities is None:
            raise graph_disabled()
        return self.entities
