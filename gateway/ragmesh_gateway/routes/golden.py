"""Golden sets and evaluations: a collection's judged queries, and its search quality scored on them.

A golden set is kept with its collection (deleted with it). `POST .../evaluate` runs every golden query through
search and adds nDCG@10, recall@10 and MRR@10 to the collection's history (`GET .../evaluations`); the search
service exports the latest as the `ragmesh_collection_quality` gauge. Scopes: storing or removing a set needs
`write`; reading it, evaluating and reading the history need `read`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES
from ..models import (
    CollectionName,
    DeleteGoldenSetResponse,
    EvaluateRequest,
    EvaluationsResponse,
    GoldenSetRequest,
    GoldenSetResponse,
    GoldenSetSummary,
    SearchModeName,
)

router = APIRouter(prefix="/api/v1", tags=["quality"], responses=ERROR_RESPONSES)


@router.put("/collections/{name}/golden", response_model=GoldenSetSummary, dependencies=[require_scope("write")])
async def set_golden_set(name: CollectionName, body: GoldenSetRequest, clients: Clients) -> GoldenSetSummary:
    """Store the collection's golden set (BEIR-style judged queries: text and doc_id -> grade), replacing the one
    it had. Refused when a query is malformed or repeated (400 GOLDEN_QUERY_INVALID, GOLDEN_QUERY_DUPLICATE,
    GOLDEN_GRADE_INVALID), when the set is too large (400 GOLDEN_SET_TOO_LARGE), or when a document graded
    relevant is not in the collection (404 GOLDEN_DOCUMENT_NOT_FOUND)."""
    return await clients.set_golden_set(name, body.queries)


@router.get("/collections/{name}/golden", response_model=GoldenSetResponse, dependencies=[require_scope("read")])
async def get_golden_set(name: CollectionName, clients: Clients) -> GoldenSetResponse:
    """The collection's golden set (404 GOLDEN_SET_NOT_FOUND when it has none)."""
    return await clients.get_golden_set(name)


@router.delete(
    "/collections/{name}/golden", response_model=DeleteGoldenSetResponse, dependencies=[require_scope("write")]
)
async def delete_golden_set(name: CollectionName, clients: Clients) -> DeleteGoldenSetResponse:
    """Remove the collection's golden set; its evaluation history is kept."""
    return DeleteGoldenSetResponse(collection=name, deleted_queries=await clients.delete_golden_set(name))


@router.post("/collections/{name}/evaluate", response_model=EvaluationsResponse, dependencies=[require_scope("read")])
async def evaluate_collection(
    name: CollectionName,
    clients: Clients,
    body: Annotated[EvaluateRequest | None, Body()] = None,
) -> EvaluationsResponse:
    """Score the collection's current index on its golden set: every golden query is searched (each of `modes`,
    default: the search service's default mode), the documents ranked (best chunk each) and scored: nDCG@10,
    recall@10, MRR@10, means over the queries. The scores are added to the collection's history and exported as
    metrics. With `version`, that version of the collection is scored instead (one a re-index is building, or
    the one kept for a rollback): its scores are only returned (404 VERSION_NOT_FOUND when it keeps no such
    version)."""
    modes = body.modes if body is not None and body.modes else ()
    version = body.version if body is not None else None
    return EvaluationsResponse(collection=name, evaluations=await clients.evaluate_collection(name, modes, version))


@router.get("/collections/{name}/evaluations", response_model=EvaluationsResponse, dependencies=[require_scope("read")])
async def list_evaluations(
    name: CollectionName,
    clients: Clients,
    mode: Annotated[SearchModeName | None, Query(description="Only this mode's evaluations.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="At most this many, the newest.")] = 100,
) -> EvaluationsResponse:
    """The collection's evaluation history, oldest first (the newest 100 are kept)."""
    return EvaluationsResponse(
        collection=name, evaluations=await clients.list_evaluations(name, mode=mode, limit=limit)
    )
