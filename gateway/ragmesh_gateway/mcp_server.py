"""The gateway as an MCP server: the same tools over streamable HTTP (mounted at /mcp by `create_app`) and
over stdio (`ragmesh mcp`), both calling the one gRPC client layer (`MeshClients`) the REST routes use, so a
tool and its REST twin never diverge.

Tool names are a contract: search, fetch_document, ingest_text, ingest_url, convert_to_text,
list_collections, delete_document, delete_collection. With RAGMESH_MCP_READ_ONLY=true the write tools
(ingest_*, delete_*) are not registered at all.

A failed tool call is an MCP tool error (`isError: true`) whose structured content is
`{"error": <the REST error object>}` -- the same `code` and `reason` a REST client gets -- and whose text
starts with the reason. Arguments that do not match a tool's schema fail the same way with
INVALID_ARGUMENT REQUEST_INVALID and field violations. The session survives every error.
"""

import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit

import grpc
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .auth import check_api_key
from .clients import MeshClients
from .config import GatewaySettings
from .errors import DOMAIN, error_object, error_response, internal_error, payload_too_large, validation_error
from .models import (
    CollectionsResponse,
    ConvertResponse,
    DeleteCollectionResponse,
    DeleteDocumentResponse,
    FilterValue,
    IngestResult,
    MetadataValue,
    SearchModeName,
    SearchRequest,
)

log = logging.getLogger(__name__)

SNIPPET_MAX_CHARS = 500
# Request headers of the streamable-HTTP transport (CORS must allow them for browser clients).
MCP_HEADERS = ("Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID")

ClientsProvider = Callable[[], MeshClients]

# --- parameter types (the input schemas clients show) -------------------------------------------------------
Collection = Annotated[
    str, Field(description="The collection, e.g. 'default'. Names match ^[a-z0-9][a-z0-9_-]{0,62}$.")
]
DocId = Annotated[str, Field(min_length=1, description="The document id, as returned by search or ingest_text.")]
Query = Annotated[str, Field(min_length=1, max_length=8192, description="What to look for, in natural language.")]
TopK = Annotated[int, Field(ge=1, le=100, description="How many snippets to return (1..100).")]
# Described like the REST twin's fields, so both document the same modes and filters.
Mode = Annotated[SearchModeName, Field(description=SearchRequest.model_fields["mode"].description)]
Filters = Annotated[
    dict[str, FilterValue] | None, Field(description=SearchRequest.model_fields["filters"].description)
]
Text = Annotated[str, Field(min_length=1, max_length=10_000_000, description="The text or Markdown to ingest.")]
Title = Annotated[str | None, Field(description="A title for the document.")]
Metadata = Annotated[
    dict[str, MetadataValue] | None,
    Field(description="Flat metadata (key -> string, number or boolean); search can filter on it."),
]
Url = Annotated[str, Field(min_length=1, max_length=2048, description="An http(s) URL of a web page or file.")]
Uri = Annotated[
    str,
    Field(
        min_length=1, max_length=4096,
        description="An http(s) URL, or a local file path (or file:// URI) inside the folders the server allows.",
    ),
]
Confirm = Annotated[
    bool, Field(description="Must be true: deleting a collection permanently deletes all of its documents.")
]


# --- results (structured content; the output schemas) ------------------------------------------------------
class Snippet(BaseModel):
    """One matching chunk, shortened to a snippet; fetch_document returns the whole document."""

    doc_id: str = Field(description="The document's id (pass it to fetch_document).")
    chunk_id: str
    chunk_index: int = Field(description="The chunk's position in its document.")
    score: float = Field(description="Relevance from 0 to 1; higher is better.")
    title: str = ""
    collection: str
    snippet: str = Field(description=f"The chunk's text, at most {SNIPPET_MAX_CHARS} characters.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchResult(BaseModel):
    """The best matching snippets, best first."""

    query: str
    mode: SearchModeName
    results: list[Snippet]


class FetchedDocument(BaseModel):
    """A whole document: its chunks' text joined in order."""

    doc_id: str
    collection: str
    title: str = ""
    text: str = Field(description="The whole text of the document.")
    chunks: int = Field(description="How many chunks the document is stored as.")
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str = ""
    url: str = ""
    filename: str = ""
    mime_type: str = ""


def snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def tool_error(error: RagmeshError) -> CallToolResult:
    """An MCP tool error carrying the REST error object (same code, reason, details)."""
    body = error_object(error)
    text = f"{error.reason}: {error.message}\n{json.dumps({'error': body}, ensure_ascii=False)}"
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content={"error": body},
                          is_error=True)


class RagmeshMCP(MCPServer):
    """MCPServer whose failed calls become tool errors in the ragmesh error shape."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, RagmeshError):
                return tool_error(cause)
            if isinstance(cause, ValidationError):
                # Located like request-body fields, so violations name the argument ("top_k").
                errors = [{**e, "loc": ("body", *e["loc"])} for e in cause.errors()]
                return tool_error(validation_error(errors))
            if cause is None and name not in {tool.name for tool in await self.list_tools()}:
                return tool_error(not_found("TOOL_NOT_FOUND", f"no tool named {name!r}", tool=name))
            log.error("tool %s failed", name, exc_info=cause or exc)
            return tool_error(internal_error())


def build_mcp(settings: GatewaySettings, clients: ClientsProvider) -> RagmeshMCP:
    """The MCP server with the ragmesh tools, calling `clients()` (the app's one MeshClients) for each call.
    In read-only mode (RAGMESH_MCP_READ_ONLY) only the read tools are registered."""
    server = RagmeshMCP(
        "ragmesh",
        title="ragmesh",
        instructions=(
            "Retrieval over the documents stored in ragmesh. Use `search` to find short snippets, then "
            "`fetch_document` with a snippet's doc_id for the whole text. `list_collections` shows what exists."
        ),
        version="1.0.0",
        log_level=settings.log_level,
    )
    read = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    @server.tool(annotations=read)
    async def search(
        query: Query, collection: Collection = validation.DEFAULT_COLLECTION, top_k: TopK = 5,
        mode: Mode = "hybrid", filters: Filters = None,
    ) -> SearchResult:
        """Search a collection and return the best matching snippets (at most 500 characters each) with
        their doc_id and score. Call fetch_document with a doc_id to read a whole document."""
        response = await clients().search(
            query, collections=(collection,), top_k=top_k, mode=mode, filters=filters
        )
        return SearchResult(
            query=response.query, mode=response.mode,
            results=[
                Snippet(doc_id=hit.doc_id, chunk_id=hit.chunk_id, chunk_index=hit.chunk_index, score=hit.score,
                        title=hit.title, collection=hit.collection, snippet=snippet(hit.text),
                        metadata=hit.metadata)
                for hit in response.results
            ],
        )

    @server.tool(annotations=read)
    async def fetch_document(doc_id: DocId, collection: Collection = validation.DEFAULT_COLLECTION) -> FetchedDocument:
        """Fetch the whole text of a document (its chunks joined in order) by its doc_id."""
        document = await clients().get_document(doc_id, collection=collection)
        return FetchedDocument(
            doc_id=document.doc_id, collection=document.collection, title=document.title, text=document.text,
            chunks=len(document.chunks), metadata=document.metadata, source=document.source, url=document.url,
            filename=document.filename, mime_type=document.mime_type,
        )

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True))
    async def convert_to_text(uri: Uri) -> ConvertResponse:
        """Convert a document to Markdown without storing it: an http(s) URL, or a local file (PDF, DOCX,
        PPTX, XLSX, HTML, EPUB, CSV, ...) inside the folders the server allows (RAGMESH_MCP_ROOTS)."""
        scheme = urlsplit(uri).scheme.lower()
        if scheme in ("http", "https"):
            return await clients().convert_url(uri)
        if scheme not in ("", "file") and not Path(uri).is_absolute():
            raise invalid_argument(
                "URI_SCHEME_UNSUPPORTED", "uri must be an http(s) URL or a local path", field="uri", scheme=scheme
            )
        path = local_path(uri, settings.mcp_roots)
        return await convert_local_file(clients(), path, max_bytes=settings.max_upload_bytes)

    @server.tool(annotations=read)
    async def list_collections() -> CollectionsResponse:
        """List the collections with how many documents and chunks each holds."""
        return CollectionsResponse(collections=await clients().list_collections())

    if settings.mcp_read_only:
        return server

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=False))
    async def ingest_text(
        text: Text, ctx: Context, collection: Collection = validation.DEFAULT_COLLECTION, title: Title = None,
        metadata: Metadata = None,
        doc_id: Annotated[str | None, Field(description="Document id; derived from the text when omitted. "
                                                        "Re-using an id replaces that document.")] = None,
    ) -> IngestResult:
        """Store a text or Markdown document so search can find it: it is chunked, embedded and indexed.
        Ingesting the same content again changes nothing (status "unchanged")."""
        await ctx.report_progress(0, 1, "chunking and embedding")
        result = await clients().ingest_text(
            text, collection=collection, doc_id=doc_id, title=title, metadata=metadata
        )
        await ctx.report_progress(1, 1, f"{result.status}: {result.chunks} chunks")
        return result

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                             open_world_hint=True))
    async def ingest_url(
        url: Url, ctx: Context, collection: Collection = validation.DEFAULT_COLLECTION
    ) -> IngestResult:
        """Fetch a web page or file from an http(s) URL, convert it to Markdown and store it for search."""
        await ctx.report_progress(0, 1, "fetching, converting, chunking and embedding")
        result = await clients().ingest_url(url, collection=collection)
        await ctx.report_progress(1, 1, f"{result.status}: {result.chunks} chunks")
        return result

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    async def delete_document(
        doc_id: DocId, collection: Collection = validation.DEFAULT_COLLECTION
    ) -> DeleteDocumentResponse:
        """Delete a document (all of its chunks) from a collection."""
        return DeleteDocumentResponse(deleted=await clients().delete_document(doc_id, collection=collection))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=False))
    async def delete_collection(collection: Collection, confirm: Confirm = False) -> DeleteCollectionResponse:
        """Delete a collection and every document in it. Refuses (CONFIRMATION_REQUIRED) unless confirm is
        true: ask the user before setting it."""
        deleted = await clients().delete_collection(collection, confirm=confirm)
        return DeleteCollectionResponse(name=collection, deleted=deleted)

    return server


# --- local files for convert_to_text ------------------------------------------------------------------------
def local_path(uri: str, roots: tuple[Path, ...]) -> Path:
    """The file `uri` (a path or file:// URI) names, resolved (`..` and symlinks followed) and inside one of
    `roots`; else PERMISSION_DENIED (LOCAL_PATHS_DISABLED, PATH_OUTSIDE_ROOTS) or NOT_FOUND FILE_NOT_FOUND.
    A relative path is taken relative to the first root."""
    if not roots:
        raise RagmeshError(
            grpc.StatusCode.PERMISSION_DENIED, "LOCAL_PATHS_DISABLED",
            "this server reads no local files (RAGMESH_MCP_ROOTS is empty); give an http(s) URL", DOMAIN,
        )
    raw = unquote(urlsplit(uri).path) if uri.lower().startswith("file://") else uri
    try:
        path = (roots[0] / Path(raw).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
        raise invalid_argument("PATH_INVALID", f"not a usable path: {exc}", field="uri") from None
    if not any(path.is_relative_to(root) for root in roots):
        raise RagmeshError(
            grpc.StatusCode.PERMISSION_DENIED, "PATH_OUTSIDE_ROOTS",
            "the path is outside the folders this server may read", DOMAIN,
            {"roots": ",".join(str(root) for root in roots)},
        )
    if not path.is_file():
        raise not_found("FILE_NOT_FOUND", "no such file", path=str(path))
    return path


class _ThreadFile:
    """An open file read off the event loop (the `Readable` MeshClients.convert_file streams from)."""

    def __init__(self, file: Any) -> None:
        self._file = file

    async def read(self, size: int = -1) -> bytes:
        return await asyncio.to_thread(self._file.read, size)


async def convert_local_file(clients: MeshClients, path: Path, *, max_bytes: int) -> ConvertResponse:
    """Stream a local file to the converter; files over `max_bytes` are refused before reading."""
    file = await asyncio.to_thread(path.open, "rb")
    try:
        size = os.fstat(file.fileno()).st_size  # of the file opened, not of whatever the path names now
        if size > max_bytes:
            raise payload_too_large(max_bytes)
        return await clients.convert_file(_ThreadFile(file), filename=path.name, size=size)
    finally:
        await asyncio.to_thread(file.close)


# --- HTTP: the /mcp endpoint ---------------------------------------------------------------------------------
class ApiKeyGuard:
    """ASGI wrapper: with RAGMESH_API_KEYS set, requests need `Authorization: Bearer <key>`; others get the
    REST 401 error body (and `WWW-Authenticate: Bearer`)."""

    def __init__(self, app: ASGIApp, settings: GatewaySettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            check_api_key(Headers(scope=scope).get("authorization"), self.settings.api_keys)
        except RagmeshError as exc:
            await error_response(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def http_endpoint(server: RagmeshMCP, settings: GatewaySettings) -> ASGIApp:
    """The streamable-HTTP ASGI app for /mcp behind the API-key check. Run `server.session_manager.run()`
    for as long as it serves (the gateway's lifespan does)."""
    # Builds the session manager; on a loopback host it also turns on DNS-rebinding protection.
    server.streamable_http_app(
        streamable_http_path="/mcp", host=settings.http_host, max_request_body_size=settings.max_upload_bytes
    )
    return ApiKeyGuard(StreamableHTTPASGIApp(server.session_manager), settings)


# --- stdio: `ragmesh mcp` -------------------------------------------------------------------------------------
async def serve_stdio(settings: GatewaySettings) -> None:
    """Serve the tools over stdin/stdout against a running mesh (RAGMESH_*_ADDR); logs go to stderr."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)
    clients = MeshClients(settings)
    log.info("serving MCP over stdio", extra={"read_only": settings.mcp_read_only, "search": settings.search_addr,
                                               "indexer": settings.indexer_addr})
    try:
        await build_mcp(settings, lambda: clients).run_stdio_async()
    finally:
        await clients.close()
