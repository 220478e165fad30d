"""Collections: list and delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request

from ..auth import Principal, require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES, validation_error
from ..models import CollectionName, CollectionsResponse, DeleteCollectionResponse

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
_CONFIRM = {"name": "confirm", "in": "query", "required": True,
            "description": "Must be true: deleting a collection deletes its documents.",
            "schema": {"type": "boolean", "enum": [True]}}


@router.delete("/collections/{name}", response_model=DeleteCollectionResponse, dependencies=[require_scope("admin")],
               openapi_extra={"parameters": [_CONFIRM]})
async def delete_collection(name: CollectionName, request: Request, clients: Clients) -> DeleteCollectionResponse:
    """Delete a collection and everything in it. Refuses with 400 CONFIRMATION_REQUIRED unless `confirm=true`."""
    raw = request.query_params.get("confirm", "false").strip().lower()
    if raw not in _BOOLEANS:
        raise validation_error([{"loc": ("query", "confirm"), "msg": "Input should be a valid boolean"}])
    confirm = _BOOLEANS[raw]
    return DeleteCollectionResponse(name=name, deleted=await clients.delete_collection(name, confirm=confirm))
