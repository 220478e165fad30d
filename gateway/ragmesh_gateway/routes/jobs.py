"""Bulk ingestion jobs, datasources and expired documents.

A job is queued and answered at once (`202 {"job_id"}`); follow it with `GET /api/v1/jobs/{job_id}`. Jobs
survive restarts of the indexer and are shared by its replicas.

Scopes: creating and cancelling jobs, syncing and pruning need `write`; reading needs `read`. A key limited to
some collections sees and touches only those collections' jobs, datasources and documents (a sync of every
datasource at once needs a key without a collection limit)."""

from __future__ import annotations

from typing import Annotated

import grpc
from fastapi import APIRouter, File, Form, Query, UploadFile, status
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from starlette.convertors import Convertor, register_url_convertor

from ..auth import Principal, require_scope
from ..deps import Clients, one_value_per_field
from ..errors import DOMAIN, NOT_ALLOWED_RESPONSES, UPLOAD_ERROR_RESPONSES
from ..models import (
    JOB_ID_PATTERN,
    CollectionName,
    CreateJobRequest,
    DatasourcesResponse,
    ExpiredDocumentsResponse,
    Job,
    JobAccepted,
    JobId,
    JobsResponse,
    PruneExpiredResponse,
    SyncRequest,
    blank_is_omitted,
    multipart_body,
)


class _JobIdConvertor(Convertor[str]):
    """Routes `/jobs/{job_id:job_id}` only for well-formed ids, so `/jobs/archive` is never a job id."""

    regex = JOB_ID_PATTERN.removeprefix("^").removesuffix("$")

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("job_id", _JobIdConvertor())
router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=UPLOAD_ERROR_RESPONSES)


@router.post(
    "/jobs",
    response_model=JobAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[require_scope("write")],
    responses=NOT_ALLOWED_RESPONSES,
)
async def create_job(body: CreateJobRequest, clients: Clients) -> JobAccepted:
    """Queue a job that ingests a list of URLs, a list of texts, or a folder on the indexer's machine (under
    RAGMESH_INDEXER_ROOTS; `.gitignore`/`.ragmeshignore` and the default skips apply, secrets are never read,
    binaries/oversized files are skipped with a reason). A folder or URL list is remembered as a datasource of
    the collection (see `/datasources`). A failed document never fails the job."""
    job = await clients.create_job(
        collection=body.collection,
        urls=body.urls,
        documents=body.documents,
        folder=body.folder,
        prune=body.prune,
        fresh_for_seconds=body.fresh_for_seconds,
    )
    return JobAccepted(job_id=job.job_id, job=job)


_ARCHIVE_FORM = multipart_body(
    "A ZIP archive; each member is ingested under its path.",
    {"collection": blank_is_omitted(CreateJobRequest.model_json_schema()["properties"]["collection"])},
)


@router.post(
    "/jobs/archive",
    response_model=JobAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[require_scope("write"), one_value_per_field("file", "collection")],
    openapi_extra={"requestBody": _ARCHIVE_FORM},
)
async def create_archive_job(
    file: Annotated[UploadFile, File(description="A ZIP archive; each member is ingested under its path.")],
    clients: Clients,
    collection: Annotated[CollectionName, Form()] = "default",
) -> JobAccepted:
    """Queue a job that ingests the members of an uploaded ZIP archive (each titled and identified by its path
    in the archive; the folder skip rules apply). Encrypted archives and archives that unpack past the
    indexer's limit are refused."""
    job = await clients.create_job(collection=collection, archive=await file.read(), archive_name=file.filename or "")
    return JobAccepted(job_id=job.job_id, job=job)


@router.get("/jobs", response_model=JobsResponse)
async def list_jobs(
    clients: Clients,
    principal: Annotated[Principal, require_scope("read", collections=False)],
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many.")] = 50,
) -> JobsResponse:
    """Recent jobs, newest first (without per-document errors)."""
    return JobsResponse(jobs=[job for job in await clients.list_jobs(limit) if principal.may_touch(job.collection)])


@router.get("/jobs/{job_id:job_id}", response_model=Job)
async def get_job(
    job_id: JobId,
    clients: Clients,
    principal: Annotated[Principal, require_scope("read", collections=False)],
) -> Job:
    """A job: queued/running/done/failed/cancelled (a re-index also rejected), counts, bytes, per-document
    errors, skipped files, when it started and finished, its rate, and for a re-index its versions and gate."""
    job = await clients.get_job(job_id)
    principal.require_collections([job.collection])
    return job


@router.post("/jobs/{job_id:job_id}/cancel", response_model=Job)
async def cancel_job(
    job_id: JobId,
    clients: Clients,
    principal: Annotated[Principal, require_scope("write", collections=False)],
) -> Job:
    """Cancel a job: documents not started yet are not ingested, and the job stays readable with GET (state
    `cancelled`, its counts and errors). Cancelling a finished job changes nothing."""
    principal.require_collections([(await clients.get_job(job_id)).collection])
    return await clients.cancel_job(job_id)


@router.get("/datasources", response_model=DatasourcesResponse)
async def list_datasources(
    clients: Clients,
    principal: Annotated[Principal, require_scope("read", collections=False)],
    collection: Annotated[CollectionName | None, Query(description="Only this collection's.")] = None,
) -> DatasourcesResponse:
    """The folders and URL lists synced into collections, with their options and whether a sync is due."""
    if collection is not None:
        principal.require_collections([collection])
    found = await clients.list_datasources(collection)
    return DatasourcesResponse(datasources=[d for d in found if principal.may_touch(d.collection)])


@router.post("/datasources/sync", response_model=JobsResponse, status_code=status.HTTP_202_ACCEPTED)
async def sync_datasources(
    body: SyncRequest,
    clients: Clients,
    principal: Annotated[Principal, require_scope("write", collections=False)],
) -> JobsResponse:
    """Queue a job for every datasource that is due (never synced, past its fresh_until, or without a
    freshness limit), or for every one with `all`. Unchanged files are skipped by their content hash."""
    if body.collection is not None:
        principal.require_collections([body.collection])
    elif principal.collections is not None:
        raise RagmeshError(
            grpc.StatusCode.PERMISSION_DENIED,
            Reason.COLLECTION_REQUIRED,
            "this API key is limited to some collections: name the collection to sync",
            DOMAIN,
            {"allowed_collections": ",".join(sorted(principal.collections))},
        )
    return JobsResponse(jobs=await clients.sync_datasources(body.collection, everything=body.all))


@router.get(
    "/collections/{name}/expired", response_model=ExpiredDocumentsResponse, dependencies=[require_scope("read")]
)
async def expired_documents(name: CollectionName, clients: Clients) -> ExpiredDocumentsResponse:
    """The documents of a collection whose fresh_until has passed."""
    return ExpiredDocumentsResponse(documents=await clients.expired_documents(name))


@router.post(
    "/collections/{name}/expired/prune", response_model=PruneExpiredResponse, dependencies=[require_scope("write")]
)
async def prune_expired(name: CollectionName, clients: Clients) -> PruneExpiredResponse:
    """Delete the documents of a collection whose fresh_until has passed (GET .../expired then lists none)."""
    return PruneExpiredResponse(deleted=await clients.prune_expired(name))
