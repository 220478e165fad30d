"""The converter's error reasons (domain converter.ragmesh), one constructor each.

The gateway maps them by reason: PAYLOAD_TOO_LARGE -> 413, UNSUPPORTED_MEDIA_TYPE -> 415,
DOCUMENT_CONVERSION_FAILED / DOCUMENT_ENCRYPTED / EMPTY_DOCUMENT -> 422.
"""

from __future__ import annotations

import grpc
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason

DOMAIN = "converter.ragmesh"


def _error(code: grpc.StatusCode, reason: str, message: str, **metadata: object) -> RagmeshError:
    return RagmeshError(code, reason, message, DOMAIN, {k: str(v) for k, v in metadata.items() if v != ""})


def unsupported_media_type(detected: str, **metadata: object) -> RagmeshError:
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.UNSUPPORTED_MEDIA_TYPE,
        f"this content ({detected}) is not a supported document format; supported: PDF, DOCX, PPTX, XLSX, XLS, "
        "EPUB, HTML, CSV/TSV, JSON, XML/RSS, Jupyter notebooks, Outlook .msg, plain text, Markdown and ZIP",
        detected_mime_type=detected,
        **metadata,
    )


def conversion_failed(mime_type: str, detail: str) -> RagmeshError:
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.DOCUMENT_CONVERSION_FAILED,
        f"the {mime_type} document could not be read; it may be corrupt or truncated ({detail[:300]})",
        mime_type=mime_type,
    )


def encrypted(mime_type: str, *, what: str = "") -> RagmeshError:
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.DOCUMENT_ENCRYPTED,
        f"the {what or mime_type} document is password-protected; remove the password and send it again",
        mime_type=mime_type,
    )


def empty_document(mime_type: str = "") -> RagmeshError:
    what = f"the {mime_type} document" if mime_type else "the document"
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.EMPTY_DOCUMENT,
        f"{what} is empty: it has no bytes or no text to convert (scanned images are not OCR'd)",
        mime_type=mime_type,
    )


def payload_too_large(size: int | None, max_bytes: int, *, what: str = "the document") -> RagmeshError:
    seen = f" ({size} bytes)" if size is not None else ""
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.PAYLOAD_TOO_LARGE,
        f"{what}{seen} is larger than the limit of {max_bytes} bytes",
        max_bytes=max_bytes,
        size_bytes="" if size is None else size,
    )


def url_invalid(url: str, why: str) -> RagmeshError:
    return invalid_argument(Reason.URL_INVALID, f"{why}: {url[:200]!r}", field="url", url=url[:200])


def url_not_allowed(url: str, host: str, address: str) -> RagmeshError:
    return _error(
        grpc.StatusCode.PERMISSION_DENIED,
        Reason.URL_NOT_ALLOWED,
        f"{host} resolves to {address}, a private, loopback, link-local or otherwise non-public address; "
        "the converter only fetches public URLs (RAGMESH_CONVERTER_ALLOW_PRIVATE_URLS)",
        url=url[:200],
        host=host,
        address=address,
    )


def url_fetch_failed(url: str, message: str, *, http_status: int | None = None, cause: str = "") -> RagmeshError:
    return _error(
        grpc.StatusCode.INVALID_ARGUMENT,
        Reason.URL_FETCH_FAILED,
        f"fetching {url[:200]} failed: {message}",
        url=url[:200],
        http_status="" if http_status is None else http_status,
        cause=cause,
    )


def url_fetch_timeout(url: str, seconds: float) -> RagmeshError:
    return _error(
        grpc.StatusCode.DEADLINE_EXCEEDED,
        Reason.URL_FETCH_TIMEOUT,
        f"fetching {url[:200]} took longer than {seconds:g} s",
        url=url[:200],
        timeout_seconds=seconds,
    )
