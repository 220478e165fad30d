"""Conversion to Markdown without ingesting: an uploaded file or a URL."""

from __future__ import annotations

import json

import grpc
from fastapi import APIRouter, Request
from pydantic import ValidationError
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from starlette.datastructures import UploadFile

from ..auth import require_scope
from ..deps import Clients
from ..errors import DOMAIN, NOT_ALLOWED_RESPONSES, UPLOAD_ERROR_RESPONSES, validation_error
from ..models import ConvertResponse, ConvertUrlRequest

router = APIRouter(prefix="/api/v1", tags=["convert"], responses=UPLOAD_ERROR_RESPONSES)

_REQUEST_BODY = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary", "description": "The file."}},
            }
        },
        "application/json": {"schema": ConvertUrlRequest.model_json_schema()},
    },
}


@router.post(
    "/convert",
    response_model=ConvertResponse,
    openapi_extra={"requestBody": _REQUEST_BODY},
    dependencies=[require_scope("read", collections=False)],
    responses=NOT_ALLOWED_RESPONSES,
)
async def convert(request: Request, clients: Clients) -> ConvertResponse:
    """Convert a document to Markdown: send multipart `file`, or JSON `{"url": "https://..."}`.

    The file is streamed to the converter in pieces. Unknown formats get 415; corrupt, encrypted or empty
    documents 422."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type.startswith("multipart/form-data"):
        async with request.form(max_files=1, max_fields=8) as form:
            file = form.get("file")
            if not isinstance(file, UploadFile):
                raise validation_error([{"loc": ("body", "file"), "msg": "a file is required"}])
            return await clients.convert_file(
                file, filename=file.filename or "", mime_type=file.content_type or "", size=file.size or 0
            )
    if content_type.startswith("application/json"):
        try:
            body = ConvertUrlRequest.model_validate(json.loads(await request.body()))
        except ValueError as exc:  # invalid JSON or a ValidationError
            errors = exc.errors() if isinstance(exc, ValidationError) else [{"loc": ("body",), "msg": str(exc)}]
            raise validation_error(errors) from None
        return await clients.convert_url(body.url)
    raise RagmeshError(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.UNSUPPORTED_MEDIA_TYPE,
        "send multipart/form-data with a `file`, or application/json with a `url`",
        DOMAIN,
        {"content_type": content_type[:100]},
    )
