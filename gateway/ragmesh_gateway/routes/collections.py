"""Collections: list and delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import Clients
from ..errors import ERROR_RESPONSES
from ..models import CollectionsResponse, DeleteCollectionResponse

router = APIRouter(prefix="/api/v1", tags=["collections"], responses=ERROR_RESPONSES)


@router.get("/collections", response_model=CollectionsResponse)
async def list_collections(clients: Clients) -> CollectionsResponse:
    """List the collections with their document and chunk counts."""
    return CollectionsResponse(collections=await clients.list_collections())


@router.delete("/collections/{name}", response_model=DeleteCollectionResponse)
async def delete_collection(
    name: str,
    clients: Clients,
    confirm: Annotated[bool, Query(description="Must be true: deleting a collection deletes its documents.")] = False,
) -> DeleteCollectionResponse:
    """Delete a collection and everything in it. Refuses with 400 CONFIRMATION_REQUIRED unless `confirm=true`."""
    return DeleteCollectionResponse(name=name, deleted=await clients.delete_collection(name, confirm=confirm))
