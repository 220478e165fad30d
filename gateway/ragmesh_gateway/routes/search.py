"""Search over one or more collections."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES
from ..models import SearchRequest, SearchResponse

router = APIRouter(prefix="/api/v1", tags=["search"], responses=ERROR_RESPONSES)


@router.post("/search", response_model=SearchResponse, dependencies=[require_scope("read")])
async def search(body: SearchRequest, clients: Clients) -> Response:
    """Find the chunks that best match a query.

    `mode` is `hybrid` (dense + BM25 fused by `fusion`: `adaptive`, the default, `relative_score`, `rrf`
    with `rrf_k`, or `dbsf`; the default mode),
    `dense`, `sparse`, or a weighted-RRF preset: `semantic` (dense-heavy) or `keyword` (BM25-heavy).
    Scores are 0..1, higher is better (see the search service's SearchResult.score). Several
    `collections` are searched in parallel and merged. `filters` match payload fields or metadata keys
    exactly (a list matches any of its values)."""
    found = await clients.search(
        body.query,
        collections=body.collection_names(),
        top_k=body.top_k,
        mode=body.mode,
        filters=body.filters,
        group_by_document=body.group_by_document,
        score_threshold=body.score_threshold,
        fusion=body.fusion,
        rrf_k=body.rrf_k,
    )
    # Serialised once by pydantic-core: FastAPI would validate the model again against response_model, turn
    # it into a dict and json.dumps that (about half of what the gateway adds to a search).
    return Response(found.model_dump_json(), media_type="application/json")
