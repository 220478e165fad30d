"""Ingestion: text, batches of texts, uploaded files and URLs."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason

from ..auth import require_scope
from ..deps import Clients, one_value_per_field
from ..errors import NOT_ALLOWED_RESPONSES, UPLOAD_ERROR_RESPONSES, ErrorObject, error_object
from ..models import (
    CollectionName,
    DocId,
    FailedIngest,
    IngestBatchRequest,
    IngestBatchResponse,
    IngestFileResponse,
    IngestResponse,
    IngestResult,
    IngestTextRequest,
    IngestUrlRequest,
    IngestUrlResponse,
    blank_is_omitted,
    multipart_body,
)

router = APIRouter(prefix="/api/v1", tags=["ingest"], responses=UPLOAD_ERROR_RESPONSES)


@router.post("/ingest", response_model=IngestResponse, dependencies=[require_scope("write")])
async def ingest_text(body: IngestTextRequest, clients: Clients) -> IngestResult:
    """Ingest one text or Markdown document: chunk, embed and store it.

    Re-ingesting the same content is a no-op (`status: "unchanged"`); changed content replaces the
    document's old chunks."""
    return await clients.ingest_text(
        body.text, collection=body.collection, doc_id=body.doc_id, title=body.title, metadata=body.metadata
    )


@router.post("/ingest/batch", response_model=IngestBatchResponse, dependencies=[require_scope("write")])
async def ingest_batch(body: IngestBatchRequest, clients: Clients) -> IngestBatchResponse:
    """Ingest several documents into one collection.

    Returns 200 with one result per document, in request order, even when some failed: a failed document
    has `status: "failed"` and an `error` object (the same shape as error responses); the others are
    ingested regardless. Only a request that cannot be processed at all (invalid, backend down) is an error."""
    outcomes = await clients.ingest_batch(body.documents, collection=body.collection)
    results: list[IngestResponse | FailedIngest] = []
    for doc, outcome in zip(body.documents, outcomes, strict=True):
        if isinstance(outcome, RagmeshError):
            results.append(
                FailedIngest(doc_id=doc.doc_id or "", error=ErrorObject.model_validate(error_object(outcome)))
            )
        else:
            results.append(IngestResponse.model_validate(outcome.model_dump()))
    return IngestBatchResponse(results=results)


def _file_form() -> dict[str, Any]:
    """The multipart body as it is read: `metadata` is a JSON object sent as one part (application/json)."""
    text = IngestTextRequest.model_json_schema()["properties"]
    return multipart_body(
        "The file (PDF, DOCX, PPTX, XLSX, HTML, EPUB, CSV, ...).",
        {
            "collection": blank_is_omitted(text["collection"]),
            "doc_id": blank_is_omitted(
                text["doc_id"]["anyOf"][0], "Document id; derived from the file name if omitted."
            ),
            "title": {"type": "string", "description": "Document title."},
            "metadata": {key: value for key, value in text["metadata"].items() if key != "default"},
        },
        encoding={"metadata": {"contentType": "application/json"}},
    )


@router.post(
    "/ingest/file",
    response_model=IngestFileResponse,
    dependencies=[require_scope("write"), one_value_per_field("file", "collection", "doc_id", "title", "metadata")],
    openapi_extra={"requestBody": _file_form()},
)
async def ingest_file(
    file: Annotated[UploadFile, File(description="The file (PDF, DOCX, PPTX, XLSX, HTML, EPUB, CSV, ...).")],
    clients: Clients,
    collection: Annotated[CollectionName, Form()] = "default",
    doc_id: Annotated[DocId | None, Form(description="Document id; derived from the file name if omitted.")] = None,
    title: Annotated[str | None, Form()] = None,
    metadata: Annotated[str | None, Form(description="Flat user metadata as a JSON object.")] = None,
) -> IngestResult:
    """Upload a file and ingest it: convert to Markdown, chunk, embed and store.

    Bodies over RAGMESH_MAX_UPLOAD_BYTES get 413; formats the converter does not know get 415; corrupt,
    encrypted or empty files get 422."""
    data = await file.read()
    return await clients.ingest_file(
        data,
        filename=file.filename or "",
        mime_type=file.content_type or "",
        collection=collection,
        doc_id=doc_id,
        title=title,
        metadata=_metadata_form(metadata),
    )


@router.post(
    "/ingest_url",
    response_model=IngestUrlResponse,
    dependencies=[require_scope("write")],
    responses=NOT_ALLOWED_RESPONSES,
)
async def ingest_url(body: IngestUrlRequest, clients: Clients) -> IngestResult:
    """Fetch an http(s) URL, convert it to Markdown and ingest it.

    Private, loopback and link-local targets are refused unless the converter allows them."""
    return await clients.ingest_url(
        body.url, collection=body.collection, doc_id=body.doc_id, title=body.title, metadata=body.metadata
    )


def _metadata_form(raw: str | None) -> dict[str, Any]:
    """The `metadata` form field: a JSON object, else 400 METADATA_INVALID."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise invalid_argument(Reason.METADATA_INVALID, "metadata must be a JSON object", field="metadata")
    return value
