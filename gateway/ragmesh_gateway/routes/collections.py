"""Collections: list, delete, re-index into a new version, roll back to the previous one.

Deleting, re-indexing and rolling back are collection management: they need `admin` (and a key limited to some
collections may manage only those)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, status

from ..auth import Principal, require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES, ErrorResponse, validation_error
from ..models import (
    CollectionName,
    CollectionsResponse,
    DeleteCollectionResponse,
    JobAccepted,
    ReindexRequest,
    RollbackResponse,
)

router = APIRouter(prefix="/api/v1", tags=["collections"], responses=ERROR_RESPONSES)


@router.get("/collections", response_model=CollectionsResponse)
async def list_collections(
    clients: Clients, principal: Annotated[Principal, require_scope("read", collections=False)]
) -> CollectionsResponse:
    """List the collections with their document and chunk counts (those the API key may use)."""
    return CollectionsResponse(collections=[c for c in await clients.list_collections() if principal.may_touch(c.name)])


# `confirm` is required and must be true: the contract says so. The route reads it itself, so that a call
# without it gets the specific CONFIRMATION_REQUIRED rather than a generic REQUEST_INVALID.
_BOOLEANS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}
_CONFIRM = {
    "name": "confirm",
    "in": "query",
    "required": True,
    "description": "Must be true: deleting a collection deletes its documents.",
    "schema": {"type": "boolean", "enum": [True]},
}


@router.delete(
    "/collections/{name}",
    response_model=DeleteCollectionResponse,
    dependencies=[require_scope("admin")],
    openapi_extra={"parameters": [_CONFIRM]},
)
async def delete_collection(name: CollectionName, request: Request, clients: Clients) -> DeleteCollectionResponse:
    """Delete a collection and everything in it. Refuses with 400 CONFIRMATION_REQUIRED unless `confirm=true`."""
    raw = request.query_params.get("confirm", "false").strip().lower()
    if raw not in _BOOLEANS:
        raise validation_error([{"loc": ("query", "confirm"), "msg": "Input should be a valid boolean"}])
    confirm = _BOOLEANS[raw]
    return DeleteCollectionResponse(name=name, deleted=await clients.delete_collection(name, confirm=confirm))


# A re-index or rollback that conflicts with the collection's versions as they are.
_CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {
        "model": ErrorResponse,
        "description": (
            "A re-index of the collection is running (REINDEX_IN_PROGRESS), or, for a rollback, there is no version to "
            "go back to (NO_PREVIOUS_VERSION: none kept, or its retention passed)."
        ),
    }
}


@router.post(
    "/collections/{name}/reindex",
    response_model=JobAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[require_scope("admin")],
    responses=_CONFLICT,
)
async def reindex_collection(
    name: CollectionName,
    clients: Clients,
    body: Annotated[ReindexRequest | None, Body()] = None,
) -> JobAccepted:
    """Re-index a collection into a new version (another chunking and/or embedding model) from the text it
    stores, as a job (`kind` "reindex"; follow it with GET /api/v1/jobs/{job_id}). Searches keep using the
    current version meanwhile, and writes go to both. When the new version is built, both are scored on the
    collection's golden set and the collection switches only if the new one's nDCG@10 is not lower by more than
    `tolerance` (or with `force`); otherwise the job ends `rejected` with both scores in `job.reindex`. The
    replaced version is kept for `POST .../rollback` for `retention_seconds`. Refused while another re-index of
    the collection runs (409 REINDEX_IN_PROGRESS), for an unknown collection (404 COLLECTION_NOT_FOUND), or for
    settings the indexer cannot use (400: CHUNK_OVERLAP_OUT_OF_RANGE, CHUNK_TOKENS_OUT_OF_RANGE, an unknown
    model)."""
    body = body or ReindexRequest()
    job = await clients.reindex_collection(
        name,
        chunk_tokens=body.chunk_tokens,
        chunk_overlap_tokens=body.chunk_overlap_tokens,
        model=body.model,
        tolerance=body.tolerance,
        force=body.force,
        retention_seconds=body.retention_seconds,
    )
    return JobAccepted(job_id=job.job_id, job=job)


@router.post(
    "/collections/{name}/rollback",
    response_model=RollbackResponse,
    dependencies=[require_scope("admin")],
    responses=_CONFLICT,
)
async def rollback_collection(name: CollectionName, clients: Clients) -> RollbackResponse:
    """Switch a collection back to the version it used before its last switch, while that one is kept; the
    version it replaces is kept in turn, so a second rollback undoes the first."""
    return await clients.rollback_collection(name)
