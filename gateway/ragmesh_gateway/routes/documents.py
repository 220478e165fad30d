"""Whole documents: fetch and delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..auth import require_scope
from ..deps import Clients
from ..errors import ERROR_RESPONSES
from ..models import CollectionName, DeleteDocumentResponse, DocId, Document

router = APIRouter(prefix="/api/v1", tags=["documents"], responses=ERROR_RESPONSES)

Collection = Annotated[CollectionName, Query(description="The document's collection.")]


@router.get("/documents/{doc_id:path}", response_model=Document, dependencies=[require_scope("read")])
async def get_document(doc_id: DocId, clients: Clients, collection: Collection = "default") -> Document:
    """Fetch a whole document: its chunks in order and their text joined (404 when it does not exist)."""
    return await clients.get_document(doc_id, collection=collection)


@router.delete("/documents/{doc_id:path}", response_model=DeleteDocumentResponse, dependencies=[require_scope("write")])
async def delete_document(
    doc_id: DocId, clients: Clients, collection: Collection = "default"
) -> DeleteDocumentResponse:
    """Delete all chunks of a document."""
    return DeleteDocumentResponse(deleted=await clients.delete_document(doc_id, collection=collection))
