"""The converter's domain logic: bytes or a URL in, Markdown and metadata out (no gRPC here).

One `Converter` is created at start-up (markitdown and magika load once) and shared by every call.
Conversions run on a pool of MAX_CONCURRENCY worker threads, off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import io
import re
from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import Any

import httpx
import magika
from markitdown import FileConversionException, StreamInfo, UnsupportedFormatException
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason
from ragmesh_common.threads import named_pool

from . import errors
from .config import ConverterSettings
from .detect import SPREADSHEET_MIMES, clean_title, detect, inspect
from .engine import build_markitdown
from .fetch import UrlFetcher

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|_|`)(.+?)\1")
# Messages of the libraries behind markitdown when a file is password-protected (legacy XLS via xlrd).
_ENCRYPTED_HINTS = ("encrypted", "password")


@dataclass(frozen=True)
class ConvertedDoc:
    """A document converted to Markdown."""

    markdown: str
    title: str
    mime_type: str
    size_bytes: int
    url: str = ""
    filename: str = ""


class Converter:
    """Converts documents with markitdown; create once, `await close()` at shutdown."""

    def __init__(self, settings: ConverterSettings, *, http_transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        self._markitdown = build_markitdown()
        self._magika = magika.Magika()
        self._pool = named_pool(settings.max_concurrency, "convert")
        self._fetcher = UrlFetcher(settings, transport=http_transport)

    async def close(self) -> None:
        await self._fetcher.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def convert_bytes(self, data: bytes, filename: str = "", mime_type: str = "") -> ConvertedDoc:
        """Convert a whole document; `filename` and `mime_type` are hints, the content decides."""
        self._check_size(len(data))
        return await self._run(data, filename=filename, mime_type=mime_type)

    async def convert_chunks(
        self, chunks: AsyncIterable[bytes], filename: str = "", mime_type: str = "", size_bytes: int = 0
    ) -> ConvertedDoc:
        """Convert a document that arrives in pieces. A declared `size_bytes` over the cap is refused before
        any piece is read, and the running total is refused as soon as it passes the cap."""
        self._check_size(size_bytes)
        body = bytearray()
        async for chunk in chunks:
            self._check_size(len(body) + len(chunk))
            body += chunk
        if size_bytes and size_bytes != len(body):
            raise invalid_argument(
                Reason.STREAM_SIZE_MISMATCH,
                f"the header announced {size_bytes} bytes but {len(body)} arrived; the upload is incomplete",
                field="header.size_bytes",
                size_bytes=size_bytes,
                received_bytes=len(body),
            )
        return await self._run(bytes(body), filename=filename, mime_type=mime_type)

    async def convert_url(self, url: str) -> ConvertedDoc:
        """Fetch an http(s) URL (SSRF guard, size cap, time limit) and convert what it returns."""
        fetched = await self._fetcher.fetch(url)
        return await self._run(
            fetched.data,
            filename=fetched.filename,
            mime_type=fetched.mime_type,
            charset=fetched.charset,
            url=fetched.url,
        )

    def _check_size(self, size: int) -> None:
        if size > self.settings.max_bytes:
            raise errors.payload_too_large(size, self.settings.max_bytes)

    async def _run(self, data: bytes, **kwargs: Any) -> ConvertedDoc:
        call = functools.partial(self._convert, data, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def _convert(
        self, data: bytes, *, filename: str, mime_type: str, charset: str | None = None, url: str = ""
    ) -> ConvertedDoc:
        """Blocking: detect, check, convert and title one document."""
        if not data:
            raise errors.empty_document()
        detected = detect(self._magika, data, filename, mime_type)
        metadata_title = inspect(detected, data, self.settings.max_unpacked_bytes)
        info = StreamInfo(
            mimetype=detected.mime_type,
            extension=detected.extension,
            charset=charset,
            filename=filename or None,
            url=url or None,
        )
        try:
            result = self._markitdown.convert_stream(io.BytesIO(data), stream_info=info)
        except UnsupportedFormatException:
            raise errors.unsupported_media_type(detected.mime_type) from None
        except FileConversionException as exc:
            raise _classify_failure(exc, detected.mime_type) from None
        markdown = result.markdown.strip()
        if not markdown:
            raise errors.empty_document(detected.mime_type)
        title = (
            clean_title(result.title)
            or metadata_title
            or ("" if detected.mime_type in SPREADSHEET_MIMES else first_heading(markdown))
            or filename
            or url
        )
        return ConvertedDoc(markdown, title, detected.mime_type, len(data), url, filename)


def first_heading(markdown: str) -> str:
    """The text of the first ATX heading, without link and emphasis markup."""
    match = _HEADING.search(markdown)
    if not match:
        return ""
    return clean_title(_EMPHASIS.sub(r"\2", _LINK.sub(r"\1", match.group(1))))


def _classify_failure(exc: FileConversionException, mime_type: str) -> RagmeshError:
    """DOCUMENT_ENCRYPTED when a converter failed on a password, else DOCUMENT_CONVERSION_FAILED."""
    causes = [attempt.exc_info[1] for attempt in exc.attempts or () if attempt.exc_info and attempt.exc_info[1]]
    for cause in causes:
        if any(hint in str(cause).lower() for hint in _ENCRYPTED_HINTS):
            return errors.encrypted(mime_type)
    detail = "; ".join(f"{type(c).__name__}: {c}" for c in causes) or str(exc)
    return errors.conversion_failed(mime_type, detail)
