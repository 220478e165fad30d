"""The one mapping from errors to HTTP: RagmeshError -> (status, JSON body), for every route.

Body everywhere::

    {"error": {"code": "INVALID_ARGUMENT", "reason": "COLLECTION_NAME_INVALID", "message": "...",
               "details": {<ErrorInfo metadata>, "domain": "...", "field_violations": [...]},
               "request_id": "...", "trace_id": "..."}}

Framework errors (request validation, unknown routes, wrong methods) and unexpected exceptions are turned
into RagmeshErrors first, so they take the same path. MCP tools (later) reuse `error_object`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from ragmesh_common.errors import FieldViolation, RagmeshError
from ragmesh_common.reasons import Reason
from starlette.exceptions import HTTPException as StarletteHTTPException

from .context import current_trace_id, request_id_var

log = logging.getLogger(__name__)

DOMAIN = "gateway.ragmesh"

# HTTP status by gRPC code. CANCELLED -> 503: the gateway only sees CANCELLED from a backend (when the
# HTTP client itself goes away there is nobody left to answer), so the server side gave up on the call --
# for the client that is "temporarily unavailable, try again", which is what 503 says. 499 is an nginx
# log convention that clients and proxies do not understand.
_STATUS_BY_CODE: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.CANCELLED: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.DATA_LOSS: 500,
}

# Reasons that say more than their code.
_STATUS_BY_REASON: dict[str, int] = {
    Reason.PAYLOAD_TOO_LARGE: 413,
    Reason.UNSUPPORTED_MEDIA_TYPE: 415,
    Reason.DOCUMENT_CONVERSION_FAILED: 422,
    Reason.DOCUMENT_ENCRYPTED: 422,
    Reason.EMPTY_DOCUMENT: 422,
    Reason.ARCHIVE_INVALID: 422,
    # The URL was well-formed but what it points at could not be fetched (no such host, the server's own error).
    Reason.URL_FETCH_FAILED: 422,
    Reason.METHOD_NOT_ALLOWED: 405,
    # A collection's versions as they are conflict with the request: another re-index runs, or a rollback has
    # nothing to go back to (FAILED_PRECONDITION from the indexer; the request itself was fine).
    Reason.REINDEX_IN_PROGRESS: 409,
    Reason.NO_PREVIOUS_VERSION: 409,
}

# Framework HTTP errors (routing, body parsing) -> (code, reason).
_CODE_BY_HTTP_STATUS: dict[int, tuple[grpc.StatusCode, str]] = {
    400: (grpc.StatusCode.INVALID_ARGUMENT, Reason.REQUEST_INVALID),
    401: (grpc.StatusCode.UNAUTHENTICATED, Reason.UNAUTHENTICATED),
    403: (grpc.StatusCode.PERMISSION_DENIED, Reason.PERMISSION_DENIED),
    404: (grpc.StatusCode.NOT_FOUND, Reason.ROUTE_NOT_FOUND),
    405: (grpc.StatusCode.UNIMPLEMENTED, Reason.METHOD_NOT_ALLOWED),
    413: (grpc.StatusCode.INVALID_ARGUMENT, Reason.PAYLOAD_TOO_LARGE),
    415: (grpc.StatusCode.INVALID_ARGUMENT, Reason.UNSUPPORTED_MEDIA_TYPE),
}


class ErrorObject(BaseModel):
    """What went wrong, in the same shape on every route (and in failed batch slots)."""

    code: str = Field(description="Canonical gRPC status code name, e.g. INVALID_ARGUMENT.")
    reason: str = Field(description="Machine-readable reason, UPPER_SNAKE_CASE, e.g. COLLECTION_NAME_INVALID.")
    message: str = Field(description="A message for people.")
    details: dict[str, Any] = Field(
        description="The ErrorInfo metadata plus `domain` and `field_violations` ([{field, description}])."
    )
    request_id: str = Field(description="The request's id (also in the X-Request-ID response header).")
    trace_id: str = Field(description="The OpenTelemetry trace id, or empty when tracing is off.")


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorObject


# For `responses=` on routers, so OpenAPI documents the error shape.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": HTTPStatus(status).phrase}
    for status in (400, 401, 403, 404, 429, 503, 504)
}
# A 403 that is about what a request names, not about its key: a URL the converter may not fetch, a folder
# outside the indexer's roots. Documented whether or not keys are configured (the generic, key-only 403 is
# dropped from the OpenAPI document when they are not).
NOT_ALLOWED_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {
        "model": ErrorResponse,
        "description": "The URL or folder may not be read (URL_NOT_ALLOWED, LOCAL_PATHS_DISABLED, PATH_OUTSIDE_ROOTS), "
        "or the API key may not do this (SCOPE_INSUFFICIENT, COLLECTION_FORBIDDEN).",
    }
}
UPLOAD_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERROR_RESPONSES,
    **{status: {"model": ErrorResponse, "description": HTTPStatus(status).phrase} for status in (413, 415, 422)},
}


def http_status(error: RagmeshError) -> int:
    """The HTTP status for an error: by reason where it says more than the code, else by code."""
    return _STATUS_BY_REASON.get(error.reason) or _STATUS_BY_CODE.get(error.code, 500)


def error_object(error: RagmeshError) -> dict[str, Any]:
    """The inner error object: {"code", "reason", "message", "details", "request_id", "trace_id"}."""
    details: dict[str, Any] = dict(error.metadata)
    details["domain"] = error.domain or DOMAIN
    details["field_violations"] = [{"field": v.field, "description": v.description} for v in error.field_violations]
    if error.retry_after is not None:
        details["retry_after_seconds"] = round(error.retry_after, 3)
    return {
        "code": error.code.name,
        "reason": error.reason,
        "message": error.message,
        "details": details,
        "request_id": request_id_var.get(),
        "trace_id": current_trace_id(),
    }


def error_response(error: RagmeshError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The HTTP response for an error (401s carry `WWW-Authenticate: Bearer`; 429s, and 503s that know when to
    come back, carry `Retry-After` in whole seconds)."""
    status = http_status(error)
    headers = dict(headers or {})
    if error.code == grpc.StatusCode.UNAUTHENTICATED:
        headers.setdefault("WWW-Authenticate", "Bearer")
    retry_after = retry_after_seconds(error)
    if retry_after is not None and status in (429, 503):
        headers.setdefault("Retry-After", str(retry_after))
    if status >= 500:
        log.warning(
            "%s %s: %s", error.code.name, error.reason, error.message, extra={"request_id": request_id_var.get()}
        )
    return JSONResponse({"error": error_object(error)}, status_code=status, headers=headers)


# Without a hint from the service, how long a client told "too many requests" should wait.
DEFAULT_RETRY_AFTER_SECONDS = 1


def retry_after_seconds(error: RagmeshError) -> int | None:
    """Whole seconds to wait before retrying (at least 1): the error's RetryInfo, its `retry_after_seconds`
    metadata, or DEFAULT_RETRY_AFTER_SECONDS for RESOURCE_EXHAUSTED; None when a retry would not help."""
    seconds = error.retry_after
    if seconds is None:
        try:
            seconds = float(error.metadata.get("retry_after_seconds", ""))
        except ValueError:
            seconds = None
    if seconds is None and error.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        seconds = DEFAULT_RETRY_AFTER_SECONDS
    return None if seconds is None else max(1, math.ceil(seconds))


def internal_error() -> RagmeshError:
    """What an unexpected exception becomes (the exception itself is logged, never shown)."""
    return RagmeshError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, "internal error in the gateway", DOMAIN)


def payload_too_large(limit: int) -> RagmeshError:
    return RagmeshError(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.PAYLOAD_TOO_LARGE,
        f"the request body is larger than the limit of {limit} bytes",
        DOMAIN,
        {"limit_bytes": str(limit)},
    )


def validation_error(errors: Sequence[Any]) -> RagmeshError:
    """A request that does not match its schema -> INVALID_ARGUMENT REQUEST_INVALID with field violations."""
    violations = tuple(FieldViolation(_field_path(e.get("loc", ())), str(e.get("msg", ""))) for e in errors)
    summary = "; ".join(f"{v.field}: {v.description}" for v in violations[:5])
    return RagmeshError(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.REQUEST_INVALID,
        f"the request is invalid: {summary}",
        DOMAIN,
        field_violations=violations,
    )


def _field_path(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = list(loc)
    if parts and parts[0] in ("body", "query", "path", "header", "cookie", "form"):
        parts = parts[1:]
    return ".".join(str(p) for p in parts) or "body"


def _from_http_exception(exc: StarletteHTTPException) -> RagmeshError:
    code, reason = _CODE_BY_HTTP_STATUS.get(exc.status_code, (grpc.StatusCode.UNKNOWN, f"HTTP_{exc.status_code}"))
    message = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    if exc.status_code == 404:
        message = "no such route; see /docs for the API"
    return RagmeshError(code, reason, message, DOMAIN)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the OpenAPI document gives the path `path`: matched against each operation's template, a
    path parameter by its schema's pattern where it states one (so `/jobs/archive` is not `/jobs/{job_id}`)."""
    patterns = getattr(app.state, "openapi_path_patterns", None)
    if patterns is None:
        patterns = app.state.openapi_path_patterns = [
            (_template_regex(template, operation), method.upper())
            for template, operations in app.openapi().get("paths", {}).items()
            for method, operation in operations.items()
            if method != "parameters"
        ]
    return sorted({method for pattern, method in patterns if pattern.match(path)})


def _template_regex(template: str, operation: dict[str, Any]) -> re.Pattern[str]:
    params = {
        p["name"]: p.get("schema", {}).get("pattern") for p in operation.get("parameters", []) if p.get("in") == "path"
    }

    def parameter(part: str) -> str:
        match = re.match(r"\{([^}:]+)", part)
        pattern = params.get(match.group(1)) if match else None
        return f"(?:{pattern.removeprefix('^').removesuffix('$')})" if pattern else ".+"

    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile(
        "^" + "".join(parameter(part) if part.startswith("{") else re.escape(part) for part in parts) + "$"
    )


def install_error_handlers(app: FastAPI) -> None:
    """Route RagmeshError, request validation and framework HTTP errors through the one mapping.
    (Unexpected exceptions are caught by `middleware.RequestContextMiddleware`.)"""

    async def on_ragmesh_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RagmeshError)
        return error_response(exc)

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(validation_error(exc.errors()))

    async def on_http_exception(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Every method the path has (Starlette only names those of the first route that matched it).
            headers["Allow"] = ", ".join(allowed_methods(app, request.url.path)) or headers.get("Allow", "")
        return error_response(_from_http_exception(exc), headers=headers)

    app.add_exception_handler(RagmeshError, on_ragmesh_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_exception)
