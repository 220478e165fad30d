"""The gateway as an MCP server: the same tools over streamable HTTP (mounted at /mcp by `create_app`) and
over stdio (`ragmesh mcp`), both calling the one gRPC client layer (`MeshClients`) the REST routes use, so a
tool and its REST twin never diverge.

Tool names are a contract: search, fetch_document, ask, ingest_text, ingest_url, ingest_urls, ingest_folder,
convert_to_text, list_collections, get_job, evaluate_collection, delete_document, delete_collection,
reindex_collection, rollback_collection; with RAGMESH_GRAPH_ENABLED=true also the graph tools
fetch_datasources_and_entity_types, graph_explore_ontology_entity, graph_explore_data_entity,
graph_fetch_data_entity_details, graph_shortest_path_between_entity_types, graph_raw_query_data,
graph_raw_query_ontology (read) and graph_ingest (write); without it they are not registered. Each tool
needs a scope (`read`, `write` or `admin`, as the REST routes); a server is built for one scope and registers
only the tools it allows, so a session opened with a read key (or with RAGMESH_MCP_READ_ONLY=true) does not even
see the write tools. A key limited to some collections may name only those. Documents are also resources,
`ragmesh://{collection}/{doc_id}` (the doc_id percent-encoded), and the `search_then_fetch` prompt tells an
assistant how to use the tools.

The ingest tools honour back-pressure: when the embedder's queue is full (RESOURCE_EXHAUSTED) they wait the
Retry-After the mesh asks for and try again, up to INGEST_RETRY_SECONDS; then the tool error carries
`details.retry_after_seconds`.

A failed tool call is an MCP tool error (`isError: true`) whose structured content is
`{"error": <the REST error object>}` -- the same `code` and `reason` a REST client gets -- and whose text
starts with the reason. Arguments that do not match a tool's schema fail the same way with
INVALID_ARGUMENT REQUEST_INVALID and field violations. The session survives every error.

Over HTTP the server is stateless (no Mcp-Session-Id): any gateway replica serves any request, so clients of both
SDK generations work behind a load balancer without affinity.
"""

import asyncio
import contextvars
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import quote, unquote, urlsplit

import grpc
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.logs import log_to_stderr
from ragmesh_common.messages import model_from
from ragmesh_common.paths import file_under_roots
from ragmesh_common.reasons import Reason
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as ASGIScope

from .auth import SCOPES, ApiKey, Principal, RateLimiter, Scope, authenticate
from .clients import MeshClients
from .config import GatewaySettings
from .errors import (
    DOMAIN,
    error_object,
    error_response,
    http_status,
    internal_error,
    payload_too_large,
    retry_after_seconds,
    validation_error,
)
from .models import (
    CHUNK_TOKENS_MAX,
    CHUNK_TOKENS_MIN,
    ENTITY_ID_DESCRIPTION,
    GRAPH_MAX_DEPTH,
    GRAPH_MAX_NEIGHBOURS,
    GRAPH_MAX_PATH_DEPTH,
    GRAPH_MAX_QUERY_CHARS,
    GRAPH_MAX_ROWS,
    MAX_RETENTION_SECONDS,
    MODEL_NAME_PATTERN,
    AskResponse,
    CollectionsResponse,
    ConvertResponse,
    DeleteCollectionResponse,
    DeleteDocumentResponse,
    Depth,
    EntityTypeName,
    EvaluationsResponse,
    ExploreResponse,
    FilterValue,
    GraphEntity,
    GraphIngestResponse,
    GraphQueryResponse,
    GraphTypesResponse,
    IngestResult,
    Job,
    MetadataValue,
    OntologyResponse,
    PathDepth,
    PathsResponse,
    ReindexRequest,
    RollbackResponse,
    SearchModeName,
    SearchRequest,
    SourceLocation,
)

log = logging.getLogger(__name__)

SNIPPET_MAX_CHARS = 500
# Request headers of the streamable-HTTP transport (CORS must allow them for browser clients).
MCP_HEADERS = ("Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID")

ClientsProvider = Callable[[], MeshClients]
T = TypeVar("T")
# How long the ingest tools keep retrying while the mesh answers RESOURCE_EXHAUSTED (a full embedder queue).
INGEST_RETRY_SECONDS = 60.0
# The caller of the tool being run (None: no keys, e.g. stdio); set by RagmeshMCP.call_tool.
current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("mcp_principal", default=None)

# --- parameter types (the input schemas clients show) -------------------------------------------------------
Collection = Annotated[
    str, Field(description="The collection, e.g. 'default'. Names match ^[a-z0-9][a-z0-9_-]{0,62}$.")
]
DocId = Annotated[str, Field(min_length=1, description="The document id, as returned by search or ingest_text.")]
Query = Annotated[str, Field(min_length=1, max_length=2000, description="What to look for, in natural language.")]
TopK = Annotated[int, Field(ge=1, le=100, description="How many snippets to return (1..100).")]
# Described like the REST twin's fields, so both document the same modes and filters.
Mode = Annotated[SearchModeName, Field(description=SearchRequest.model_fields["mode"].description)]
Filters = Annotated[dict[str, FilterValue] | None, Field(description=SearchRequest.model_fields["filters"].description)]
Text = Annotated[str, Field(min_length=1, max_length=10_000_000, description="The text or Markdown to ingest.")]
Title = Annotated[str | None, Field(description="A title for the document.")]
Metadata = Annotated[
    dict[str, MetadataValue] | None,
    Field(description="Flat metadata (key -> string, number or boolean); search can filter on it."),
]
Url = Annotated[str, Field(min_length=1, max_length=2048, description="An http(s) URL of a web page or file.")]
Uri = Annotated[
    str,
    validation.path_field(
        "An http(s) URL, or a local file path (or file:// URI) inside the folders the server allows."
    ),
]
Question = Annotated[str, Field(min_length=1, max_length=1000, description="The question, in natural language.")]
SessionId = Annotated[
    str | None,
    Field(
        description=(
            "Continue a conversation: the session_id of an earlier answer. Follow-ups are resolved against its turns."
        )
    ),
]
AskTopK = Annotated[int, Field(ge=1, le=50, description="How many chunks to retrieve for the answer (1..50).")]
DOCUMENT_URI = "ragmesh://{collection}/{doc_id}"
# Progress notifications while an answer streams: one every this many pieces of text.
ASK_PROGRESS_EVERY = 8
JobId = Annotated[str, Field(min_length=1, max_length=64, description="The job id, as returned by an ingest job.")]
Wait = Annotated[bool, Field(description="Wait for the job to finish, reporting progress (else return at once).")]
Confirm = Annotated[
    bool, Field(description="Must be true: deleting a collection permanently deletes all of its documents.")
]
# A re-index's settings, described as its REST twin's body.
_REINDEX = ReindexRequest.model_fields
ChunkTokens = Annotated[
    int | None, Field(ge=CHUNK_TOKENS_MIN, le=CHUNK_TOKENS_MAX, description=_REINDEX["chunk_tokens"].description)
]
ChunkOverlapTokens = Annotated[
    int | None, Field(ge=0, le=CHUNK_TOKENS_MAX // 2 - 1, description=_REINDEX["chunk_overlap_tokens"].description)
]
ModelName = Annotated[
    str | None,
    Field(min_length=1, max_length=63, pattern=MODEL_NAME_PATTERN, description=_REINDEX["model"].description),
]
Tolerance = Annotated[
    float | None, Field(ge=0, le=1, allow_inf_nan=False, description=_REINDEX["tolerance"].description)
]
Force = Annotated[bool, Field(description=_REINDEX["force"].description)]
RetentionSeconds = Annotated[
    int | None, Field(ge=0, le=MAX_RETENTION_SECONDS, description=_REINDEX["retention_seconds"].description)
]


def document_uri(collection: str, doc_id: str) -> str:
    """The MCP resource URI of a document (the doc_id percent-encoded, so ids with '/' stay one segment)."""
    return f"ragmesh://{collection}/{quote(doc_id, safe='')}"


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
    uri: str = Field("", description="The document as an MCP resource (ragmesh://collection/doc_id).")
    location: str = Field("", description="For a chunk of a file: where it lies, path:first-last line.")


class SearchResult(BaseModel):
    """The best matching snippets, best first."""

    query: str
    mode: SearchModeName
    results: list[Snippet]


class AnswerSource(BaseModel):
    """A document the answer was written from; the answer cites it as [number]."""

    number: int
    doc_id: str
    collection: str
    title: str = ""
    cited: bool
    snippet: str = ""
    uri: str = Field(description="The whole document as an MCP resource (ragmesh://collection/doc_id).")


class AskResult(BaseModel):
    """An answer that cites its sources by number ([1]); the cited sources are listed first."""

    answer: str
    sources: list[AnswerSource]
    session_id: str = Field(description="Pass it with a follow-up question to continue the conversation.")
    generator: str = Field(description="model (a chat model wrote it) or extractive (quoted sentences).")
    model: str = ""
    standalone_query: str = Field(description="The question as it was searched.")


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


def lines_of(location: SourceLocation | None) -> str:
    """`path:first-last`, the lines of a file a chunk holds (what editors and terminals open), or ""."""
    return f"{location.path}:{location.start_line}-{location.end_line}" if location and location.path else ""


def snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """`text` cut to at most `limit` characters, ending in an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def tool_error(error: RagmeshError) -> CallToolResult:
    """An MCP tool error carrying the REST error object (same code, reason, details)."""
    body = error_object(error)
    text = f"{error.reason}: {error.message}\n{json.dumps({'error': body}, ensure_ascii=False)}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content={"error": body}, is_error=True
    )


def _http_request(context: Any) -> Any:
    """The HTTP request a tool call arrived with (None over stdio)."""
    try:
        return context.request_context.request
    except (AttributeError, LookupError, ValueError):
        return None


class RagmeshMCP(MCPServer):
    """MCPServer whose failed calls become tool errors in the ragmesh error shape, and whose calls are
    checked against the caller's key (its collections) when keys are configured."""

    api_keys: tuple[ApiKey, ...] = ()

    def _principal(self, context: Any) -> Principal | None:
        request = _http_request(context)
        if not self.api_keys or request is None:
            return None
        return authenticate(request.headers.get("authorization"), self.api_keys)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        token = None
        try:
            principal = self._principal(context)
            if principal is not None and principal.collections is not None:
                tool = self._tool_manager.get_tool(name)
                if tool is not None and "collection" in tool.parameters.get("properties", {}):
                    named = arguments.get("collection")
                    principal.require_collections(
                        [named if isinstance(named, str) and named else validation.DEFAULT_COLLECTION]
                    )
            token = current_principal.set(principal)
            return await super().call_tool(name, arguments, context)
        except RagmeshError as exc:
            return tool_error(exc)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, RagmeshError):
                return tool_error(cause)
            if isinstance(cause, ValidationError):
                # Located like request-body fields, so violations name the argument ("top_k").
                errors = [{**e, "loc": ("body", *e["loc"])} for e in cause.errors()]
                return tool_error(validation_error(errors))
            if cause is None and name not in {tool.name for tool in await self.list_tools()}:
                return tool_error(not_found(Reason.TOOL_NOT_FOUND, f"no tool named {name!r}", tool=name))
            log.error("tool %s failed", name, exc_info=cause or exc)
            return tool_error(internal_error())
        finally:
            if token is not None:
                current_principal.reset(token)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        """As MCPServer's, with the caller's key current (a key limited to some collections reads only theirs)."""
        token = current_principal.set(self._principal(context))
        try:
            return await super().read_resource(uri, context)
        finally:
            current_principal.reset(token)


def mcp_scopes(settings: GatewaySettings) -> list[Scope]:
    """The scopes MCP servers are needed for: those of the keys (or admin without keys), capped at read in
    read-only mode."""
    scopes = {key.scope for key in settings.api_keys} or {"admin"}
    if settings.mcp_read_only:
        scopes = {"read"}
    return [scope for scope in SCOPES if scope in scopes]


async def with_backpressure(ctx: Context, call: Callable[[], Awaitable[T]], *, what: str) -> T:
    """Run `call`; while the mesh answers RESOURCE_EXHAUSTED (the embedder's queue is full), wait the
    Retry-After it asks for, telling the client, and try again for up to INGEST_RETRY_SECONDS."""
    deadline = time.monotonic() + INGEST_RETRY_SECONDS
    while True:
        try:
            return await call()
        except RagmeshError as exc:
            wait = retry_after_seconds(exc) if exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED else None
            if wait is None or time.monotonic() + wait > deadline:
                raise
            log.info("%s: %s, retrying in %d s", what, exc.reason, wait)
            await ctx.report_progress(0, 1, f"{exc.reason}: the mesh is busy, retrying in {wait} s")
            await asyncio.sleep(wait)


def build_mcp(settings: GatewaySettings, clients: ClientsProvider, *, scope: Scope | None = None) -> RagmeshMCP:
    """The MCP server with the ragmesh tools, calling `clients()` (the app's one MeshClients) for each call.
    Only the tools `scope` allows are registered (default: admin, or read in read-only mode)."""
    scope = scope or ("read" if settings.mcp_read_only else "admin")
    allowed = SCOPES[: SCOPES.index(scope) + 1]
    server = RagmeshMCP(
        "ragmesh",
        title="ragmesh",
        instructions=(
            "Retrieval over the documents stored in ragmesh. Use `search` to find short snippets, then "
            "`fetch_document` with a snippet's doc_id for the whole text. `list_collections` shows what exists."
            + (GRAPH_INSTRUCTIONS if settings.graph_enabled else "")
        ),
        version="1.0.0",
        log_level=settings.log_level,
    )
    server.api_keys = settings.api_keys
    read = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

    def tool(needs: Scope, annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register the tool when this server's scope covers `needs`."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            return server.tool(annotations=annotations)(fn) if needs in allowed else fn

        return register

    @tool("read", annotations=read)
    async def search(
        query: Query,
        collection: Collection = validation.DEFAULT_COLLECTION,
        top_k: TopK = 5,
        mode: Mode = "hybrid",
        filters: Filters = None,
    ) -> SearchResult:
        """Search a collection and return the best matching snippets (at most 500 characters each) with
        their doc_id and score. Call fetch_document with a doc_id to read a whole document."""
        response = await clients().search(query, collections=(collection,), top_k=top_k, mode=mode, filters=filters)
        return model_from(
            SearchResult,
            response,
            results=[
                model_from(
                    Snippet,
                    hit,
                    snippet=snippet(hit.text),
                    uri=document_uri(hit.collection, hit.doc_id),
                    location=lines_of(hit.location),
                )
                for hit in response.results
            ],
        )

    @tool("read", annotations=read)
    async def fetch_document(doc_id: DocId, collection: Collection = validation.DEFAULT_COLLECTION) -> FetchedDocument:
        """Fetch the whole text of a document (its chunks joined in order) by its doc_id."""
        document = await clients().get_document(doc_id, collection=collection)
        return model_from(FetchedDocument, document, chunks=len(document.chunks))

    @tool("read", annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True))
    async def convert_to_text(uri: Uri) -> ConvertResponse:
        """Convert a document to Markdown without storing it: an http(s) URL, or a local file (PDF, DOCX,
        PPTX, XLSX, HTML, EPUB, CSV, ...) inside the folders the server allows (RAGMESH_MCP_ROOTS)."""
        scheme = urlsplit(uri).scheme.lower()
        if scheme in ("http", "https"):
            return await clients().convert_url(uri)
        if scheme not in ("", "file") and not Path(uri).is_absolute():
            raise invalid_argument(
                Reason.URI_SCHEME_UNSUPPORTED, "uri must be an http(s) URL or a local path", field="uri", scheme=scheme
            )
        path = local_path(uri, settings.mcp_roots)
        return await convert_local_file(clients(), path, max_bytes=settings.max_upload_bytes)

    @tool("read", annotations=read)
    async def get_job(job_id: JobId) -> Job:
        """A job: its state (queued, running, done, failed, cancelled; a re-index also rejected), counts, bytes,
        per-document errors, skipped files and rate."""
        job = await clients().get_job(job_id)
        principal = current_principal.get()
        if principal is not None:
            principal.require_collections([job.collection])
        return job

    @tool("read", annotations=read)
    async def list_collections() -> CollectionsResponse:
        """List the collections with how many documents and chunks each holds, the version searches use and every
        version kept (state: active, building or previous; the embedding model and chunking it was built with)."""
        principal = current_principal.get()
        found = await clients().list_collections()
        return CollectionsResponse(collections=[c for c in found if principal is None or principal.may_touch(c.name)])

    # Not read-only in MCP's sense (the scores are added to the collection's history), but it changes no
    # document: a read key has it, as its REST twin.
    @tool(
        "read",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )
    async def evaluate_collection(
        ctx: Context,
        collection: Collection = validation.DEFAULT_COLLECTION,
        modes: Annotated[
            list[SearchModeName] | None,
            Field(
                min_length=1,
                max_length=5,
                description=(
                    "Search modes to score (hybrid, dense, sparse, semantic, keyword); default: the service's default "
                    "mode."
                ),
            ),
        ] = None,
        version: Annotated[
            int | None,
            Field(
                ge=1,
                le=2**31 - 1,
                description=(
                    "The version of the collection to score (list_collections shows them); default: the active one. "
                    "Another version's scores are only returned, not added to the history."
                ),
            ),
        ] = None,
    ) -> EvaluationsResponse:
        """Score a collection's search quality on its golden set (judged queries stored with it): nDCG@10,
        recall@10 and MRR@10 per mode, means over the golden queries. The scores are added to the collection's
        evaluation history; compare them with earlier ones to see whether search got better or worse."""
        await ctx.report_progress(0, 1, "searching the golden queries")
        evaluations = await clients().evaluate_collection(collection, modes or (), version)
        await ctx.report_progress(1, 1, f"scored {len(evaluations)} mode(s)")
        return EvaluationsResponse(collection=collection or validation.DEFAULT_COLLECTION, evaluations=evaluations)

    if settings.graph_enabled:
        graph_tools(tool, clients, read)

    # Not read-only in MCP's sense (the turn is kept in its session, and a chat model may be called), but it
    # changes no document: a read key (and read-only mode) has it.
    @tool(
        "read",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True
        ),
    )
    async def ask(
        query: Question,
        ctx: Context,
        collection: Collection = validation.DEFAULT_COLLECTION,
        session_id: SessionId = None,
        top_k: AskTopK = 5,
    ) -> AskResult:
        """Answer a question from the documents of a collection, citing them by number ([1]); the answer
        lists its sources (cited first) with their doc_id and resource URI. Pass the returned session_id with
        a follow-up question. Reports progress while the answer is written."""
        pieces = 0
        answer: AskResponse | None = None
        await ctx.report_progress(0, None, "searching")
        async for event in clients().ask_stream(query, collections=(collection,), top_k=top_k, session_id=session_id):
            if isinstance(event, AskResponse):
                answer = event
            else:
                pieces += 1
                if pieces % ASK_PROGRESS_EVERY == 1:
                    await ctx.report_progress(pieces, None, f"answering: {pieces} pieces written")
        assert answer is not None
        await ctx.report_progress(pieces, pieces, f"answered from {len(answer.sources)} sources")
        return model_from(
            AskResult,
            answer,
            sources=[model_from(AnswerSource, s, uri=document_uri(s.collection, s.doc_id)) for s in answer.sources],
        )

    @server.resource(
        DOCUMENT_URI,
        name="document",
        title="A ragmesh document",
        mime_type="text/markdown",
        description="The whole text of a document (its chunks joined in order).",
    )
    async def read_document(collection: str, doc_id: str) -> str:
        try:
            principal = current_principal.get()
            if principal is not None:
                principal.require_collections([collection])
            document = await clients().get_document(unquote(doc_id), collection=collection)
        except RagmeshError as exc:
            # A request for what does not exist or may not be read is "invalid params" (SEP-2164); the data
            # carries the REST error object.
            code = INTERNAL_ERROR if http_status(exc) >= 500 else INVALID_PARAMS
            raise MCPError(
                code=code, message=f"{exc.reason}: {exc.message}", data={"error": error_object(exc)}
            ) from None
        return document.text

    @server.prompt(name="search_then_fetch", title="Research a question in ragmesh")
    def search_then_fetch(
        question: Annotated[str, Field(description="What to find out.")],
        collection: Annotated[str, Field(description="The collection to search.")] = validation.DEFAULT_COLLECTION,
    ) -> str:
        """Tells the assistant to search the collection first, then fetch the most relevant documents whole
        before answering with citations."""
        return (
            f"Answer this question from the documents in the ragmesh collection {collection!r}: {question}\n\n"
            f"1. Call `search` with the question (collection={collection!r}); try other wordings if the snippets "
            "do not cover it.\n"
            "2. For the most relevant results, call `fetch_document` with their doc_id (or read the resource in "
            "their `uri`) to read the whole document, not only the snippet.\n"
            "3. Answer only from what you read. Cite each statement with the document's title and doc_id, and "
            "say so if the documents do not answer the question.\n"
            "(`ask` answers in one call with a chat model the server configured, if you prefer.)"
        )

    @tool(
        "write",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def ingest_text(
        text: Text,
        ctx: Context,
        collection: Collection = validation.DEFAULT_COLLECTION,
        title: Title = None,
        metadata: Metadata = None,
        doc_id: Annotated[
            str | None,
            Field(
                description="Document id; derived from the text when omitted. Re-using an id replaces that document."
            ),
        ] = None,
    ) -> IngestResult:
        """Store a text or Markdown document so search can find it: it is chunked, embedded and indexed.
        Ingesting the same content again changes nothing (status "unchanged")."""
        await ctx.report_progress(0, 1, "chunking and embedding")
        result = await with_backpressure(
            ctx,
            lambda: clients().ingest_text(text, collection=collection, doc_id=doc_id, title=title, metadata=metadata),
            what="ingest_text",
        )
        await ctx.report_progress(1, 1, f"{result.status}: {result.chunks} chunks")
        return result

    @tool(
        "write",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
        ),
    )
    async def ingest_url(
        url: Url, ctx: Context, collection: Collection = validation.DEFAULT_COLLECTION
    ) -> IngestResult:
        """Fetch a web page or file from an http(s) URL, convert it to Markdown and store it for search."""
        await ctx.report_progress(0, 1, "fetching, converting, chunking and embedding")
        result = await with_backpressure(
            ctx, lambda: clients().ingest_url(url, collection=collection), what="ingest_url"
        )
        await ctx.report_progress(1, 1, f"{result.status}: {result.chunks} chunks")
        return result

    @tool(
        "write",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def ingest_folder(
        folder: Annotated[
            str,
            validation.path_field(
                "A folder on the server's indexer, under RAGMESH_INDEXER_ROOTS (e.g. a repository or a share)."
            ),
        ],
        ctx: Context,
        collection: Collection = validation.DEFAULT_COLLECTION,
        prune: Annotated[bool, Field(description="Delete documents whose files are gone from the folder.")] = False,
        wait: Wait = True,
    ) -> Job:
        """Index (or re-sync) a whole folder as a job: source code and text verbatim with line ranges, documents
        converted; .gitignore rules and default skips apply, secrets are never read, unchanged files are
        skipped. Reports progress while it waits; with wait=false returns at once (then call get_job)."""
        job = await clients().create_job(collection=collection, folder=folder, prune=prune)
        return await _follow(clients(), job, ctx) if wait else job

    @tool(
        "write",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=True
        ),
    )
    async def ingest_urls(
        urls: Annotated[list[str], Field(min_length=1, max_length=10_000, description="http(s) URLs.")],
        ctx: Context,
        collection: Collection = validation.DEFAULT_COLLECTION,
        wait: Wait = True,
    ) -> Job:
        """Fetch, convert and index many URLs as one job; a URL that fails does not stop the others. Reports
        progress while it waits; with wait=false returns at once (then call get_job)."""
        job = await clients().create_job(collection=collection, urls=urls)
        return await _follow(clients(), job, ctx) if wait else job

    @tool(
        "write",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def delete_document(
        doc_id: DocId, collection: Collection = validation.DEFAULT_COLLECTION
    ) -> DeleteDocumentResponse:
        """Delete a document (all of its chunks) from a collection."""
        return DeleteDocumentResponse(deleted=await clients().delete_document(doc_id, collection=collection))

    @tool(
        "admin",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def delete_collection(collection: Collection, confirm: Confirm = False) -> DeleteCollectionResponse:
        """Delete a collection and every document in it. Refuses (CONFIRMATION_REQUIRED) unless confirm is
        true: ask the user before setting it."""
        deleted = await clients().delete_collection(collection, confirm=confirm)
        return DeleteCollectionResponse(name=collection, deleted=deleted)

    @tool(
        "admin",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )
    async def reindex_collection(
        collection: Collection,
        ctx: Context,
        chunk_tokens: ChunkTokens = None,
        chunk_overlap_tokens: ChunkOverlapTokens = None,
        model: ModelName = None,
        tolerance: Tolerance = None,
        force: Force = False,
        retention_seconds: RetentionSeconds = None,
        wait: Annotated[
            bool,
            Field(
                description=(
                    "Wait for the re-index to finish, reporting progress (else return the queued job at once; "
                    "then call get_job with its job_id)."
                )
            ),
        ] = False,
    ) -> Job:
        """Rebuild a collection as a new version with another chunking and/or embedding model, from the text it
        stores, as a job; searches keep using the current version meanwhile. When it is built, both versions
        are scored on the collection's golden set and the collection switches only if the new one is not worse
        by more than the tolerance (or with force); otherwise the job ends "rejected" and `reindex` carries
        both scores. Returns the job (follow it with get_job, or pass wait=true); the replaced version is kept
        for rollback_collection."""
        job = await clients().reindex_collection(
            collection,
            chunk_tokens=chunk_tokens,
            chunk_overlap_tokens=chunk_overlap_tokens,
            model=model,
            tolerance=tolerance,
            force=force,
            retention_seconds=retention_seconds,
        )
        return await _follow(clients(), job, ctx) if wait else job

    @tool(
        "admin",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    )
    async def rollback_collection(collection: Collection) -> RollbackResponse:
        """Switch a collection back to the version it used before its last re-index (while that version is
        kept); the version it replaces is kept in turn, so calling it again undoes the rollback."""
        return await clients().rollback_collection(collection)

    return server


# --- the graph (RAGMESH_GRAPH_ENABLED) ------------------------------------------------------------------------
GRAPH_INSTRUCTIONS = (
    " Collections may also hold an entity graph (e.g. Kubernetes objects and their relations): start with "
    "`fetch_datasources_and_entity_types`, then explore entities by id (`graph_explore_data_entity`), read one "
    "whole (`graph_fetch_data_entity_details`), or query with read-only Cypher (`graph_raw_query_data`)."
)
EntityId = Annotated[str, Field(min_length=1, max_length=1024, description=ENTITY_ID_DESCRIPTION)]
GraphDepth = Annotated[Depth, Field(description=f"Hops out, 1..{GRAPH_MAX_DEPTH} (1: direct relations only).")]
_CYPHER_HELP = (
    "One read-only Cypher statement (LadybugDB/Kùzu dialect). Each entity type is a node table and each relation "
    "type a relation table; every node has `id` ('<type>/<key>/...') and one column per property, named as the "
    "property (dotted names in backquotes: d.`spec.replicas`). Statements that write (CREATE, MERGE, SET, "
    "DELETE, COPY, ...) are refused with QUERY_NOT_READ_ONLY and change nothing."
)
RowLimit = Annotated[
    int | None, Field(ge=1, le=GRAPH_MAX_ROWS, description="At most this many rows (default: the service's, 1000).")
]
Parameters = Annotated[
    dict[str, Any] | None, Field(description="Named parameters, used as $name in the query (safer than quoting).")
]


def graph_tools(
    tool: Callable[[Scope, ToolAnnotations], Callable[[Callable[..., Any]], Callable[..., Any]]],
    clients: ClientsProvider,
    read: ToolAnnotations,
) -> None:
    """Register the graph tools (their REST twins are ragmesh_gateway.routes.graph)."""

    @tool("read", read)
    async def fetch_datasources_and_entity_types(
        collection: Collection = validation.DEFAULT_COLLECTION,
    ) -> GraphTypesResponse:
        """Start here. What a collection holds: its datasources (synced folders, URL lists), the entity types
        of its graph with how many entities each has, their properties and primary keys, and the relation types
        between them as (from_type)-[TYPE]->(to_type) with counts. An entity id is '<type>/<primary key values
        joined by '/'>'; for Kubernetes objects '<Kind>/<namespace>/<name>', e.g. 'Deployment/ragmesh/search', and
        for a workload's container 'Container/<namespace>/<workload>/<container>'."""
        return await clients().graph_types(collection)

    @tool("read", read)
    async def graph_explore_ontology_entity(
        entity_type: Annotated[EntityTypeName, Field(description="An entity type, e.g. 'Deployment'.")],
        depth: GraphDepth = 1,
        collection: Collection = validation.DEFAULT_COLLECTION,
    ) -> OntologyResponse:
        """How an entity type relates to others (the schema, not the data): the relation types within `depth`
        hops, nearest first, each as from_type -[type]-> to_type with how many relations of it exist. E.g. for
        Deployment: Service -[SELECTS]-> Deployment (incoming), Deployment -[USES]-> ServiceAccount
        (outgoing), Deployment -[HAS]-> Container (its children)."""
        return await clients().explore_ontology(collection, entity_type, depth=depth)

    @tool("read", read)
    async def graph_explore_data_entity(
        entity_id: EntityId,
        depth: GraphDepth = 1,
        collection: Collection = validation.DEFAULT_COLLECTION,
        limit: Annotated[int, Field(ge=1, le=GRAPH_MAX_NEIGHBOURS, description="At most this many neighbours.")] = 100,
    ) -> ExploreResponse:
        """An entity with its properties and its neighbours within `depth` hops, nearest first. Each neighbour
        has the relation that reached it, its `direction` seen from `via_id` (the entity the hop came from) and
        its depth: 'outgoing' means via_id -[relation]-> neighbour, 'incoming' means neighbour -[relation]->
        via_id. E.g. 'which Services send traffic to Deployment/ragmesh/search': its neighbours with relation
        SELECTS and direction incoming; 'what does the gateway's container call': the neighbours of
        'Container/ragmesh/gateway/server' with relation REFERENCES and direction outgoing (the Services its
        environment names)."""
        return await clients().explore_entity(collection, entity_id, depth=depth, limit=limit)

    @tool("read", read)
    async def graph_fetch_data_entity_details(
        entity_id: EntityId, collection: Collection = validation.DEFAULT_COLLECTION
    ) -> GraphEntity:
        """Everything about one entity: its primary key, every property (nested ones in dot notation, e.g.
        spec.replicas), labels, parent (for a child entity such as a Container) and every relation in both
        directions (direction 'outgoing': this entity -> target; 'incoming': target -> this entity)."""
        return await clients().get_entity(collection, entity_id)

    @tool("read", read)
    async def graph_shortest_path_between_entity_types(
        from_type: Annotated[EntityTypeName, Field(description="The entity type paths start from.")],
        to_type: Annotated[EntityTypeName, Field(description="The entity type paths end at.")],
        max_depth: Annotated[
            PathDepth, Field(description=f"The longest path, in hops, 1..{GRAPH_MAX_PATH_DEPTH}.")
        ] = 4,
        collection: Collection = validation.DEFAULT_COLLECTION,
    ) -> PathsResponse:
        """How two entity types are connected in the ontology: every shortest path of relation types (following
        relations in either direction), in Cypher notation such as
        '(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)'. Use a path as the MATCH pattern of a
        graph_raw_query_data statement. Empty when they are not connected within max_depth."""
        return await clients().shortest_paths(collection, from_type, to_type, max_depth=max_depth)

    @tool("read", read)
    async def graph_raw_query_data(
        query: Annotated[str, Field(min_length=1, max_length=GRAPH_MAX_QUERY_CHARS, description=_CYPHER_HELP)],
        collection: Collection = validation.DEFAULT_COLLECTION,
        parameters: Parameters = None,
        row_limit: RowLimit = None,
    ) -> GraphQueryResponse:
        """Run one read-only Cypher statement on the entities of a collection's graph and return the rows. E.g.
        "MATCH (s:Service)-[:SELECTS]->(d:Deployment) WHERE d.id = $id RETURN s.id" with parameters
        {"id": "Deployment/ragmesh/search"}. Find the types and relations first with
        fetch_datasources_and_entity_types. A statement that writes is refused (QUERY_NOT_READ_ONLY)."""
        return await clients().graph_query(collection, query, target="data", parameters=parameters, row_limit=row_limit)

    @tool("read", read)
    async def graph_raw_query_ontology(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=GRAPH_MAX_QUERY_CHARS,
                description="One read-only Cypher statement over (:EntityType {name, count, properties})"
                "-[:RELATION {type, count}]->(:EntityType).",
            ),
        ],
        collection: Collection = validation.DEFAULT_COLLECTION,
        parameters: Parameters = None,
        row_limit: RowLimit = None,
    ) -> GraphQueryResponse:
        """Run one read-only Cypher statement on a collection's ontology: the graph of its entity types,
        (:EntityType {name, count, properties})-[:RELATION {type, count}]->(:EntityType). E.g. "MATCH
        (a:EntityType)-[r:RELATION]->(b:EntityType {name: 'Deployment'}) RETURN a.name, r.type, r.count"."""
        return await clients().graph_query(
            collection, query, target="ontology", parameters=parameters, row_limit=row_limit
        )

    @tool(
        "write",
        ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False),
    )
    async def graph_ingest(
        content: Annotated[
            str,
            Field(
                min_length=1,
                max_length=10_000_000,
                description="Kubernetes YAML or JSON (one or many documents, List kinds included), or JSON Lines "
                "of entities ({type, primary_key, properties, relations}).",
            ),
        ],
        collection: Collection = validation.DEFAULT_COLLECTION,
        filename: Annotated[
            str, Field(min_length=1, max_length=255, description="A file name; its extension tells the format.")
        ] = "entities.yaml",
    ) -> GraphIngestResponse:
        """Store entities in a collection's graph and as searchable documents. Kubernetes objects become
        entities of their kind keyed by namespace and name, related by SELECTS, USES, HAS, REFERENCES, READS,
        SCALES, APPLIES_TO and PROTECTS. Ingesting an entity again replaces it. Returns counts per entity type
        and relation type."""
        return await clients().ingest_entities(collection, files=[(filename, content.encode(), "")])


JOB_POLL_SECONDS = 0.5


async def _follow(mesh: MeshClients, job: Job, ctx: Context) -> Job:
    """Wait for a job to finish, sending a progress notification whenever its count of handled documents
    changes; returns the finished job."""
    reported = -1
    while True:
        handled = job.indexed + job.unchanged + job.failed
        if handled != reported:
            await ctx.report_progress(
                handled,
                max(job.total, 1),
                f"{job.state}: {job.indexed} indexed, {job.unchanged} unchanged, {job.failed} failed of {job.total}",
            )
            reported = handled
        if job.state in ("done", "failed", "cancelled", "rejected"):
            return job
        await asyncio.sleep(JOB_POLL_SECONDS)
        job = await mesh.get_job(job.job_id)


# --- local files for convert_to_text ------------------------------------------------------------------------
def local_path(uri: str, roots: tuple[Path, ...]) -> Path:
    """The file `uri` (a path or file:// URI) names, resolved (`..` and symlinks followed) and inside one of
    `roots`; else PERMISSION_DENIED (LOCAL_PATHS_DISABLED, PATH_OUTSIDE_ROOTS) or NOT_FOUND FILE_NOT_FOUND.
    A relative path is taken relative to the first root."""
    return file_under_roots(uri, roots, domain=DOMAIN, setting="RAGMESH_MCP_ROOTS")


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
    """ASGI front of /mcp: authenticates the key (with RAGMESH_API_KEYS set; others get the REST 401 error body
    and `WWW-Authenticate: Bearer`), applies its rate limit (429 with Retry-After), and hands the request to
    the MCP server of the key's scope."""

    def __init__(self, apps: Mapping[Scope, ASGIApp], settings: GatewaySettings, rate_limiter: RateLimiter) -> None:
        self.apps = apps
        self.settings = settings
        self.rate_limiter = rate_limiter

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        try:
            client = scope.get("client") or ("", 0)
            principal = authenticate(Headers(scope=scope).get("authorization"), self.settings.api_keys, client[0])
            await self.rate_limiter.check(principal)
        except RagmeshError as exc:
            await error_response(exc)(scope, receive, send)
            return
        # The widest server the key may use (read-only mode builds only the read server).
        usable = [s for s in self.apps if principal.allows(s)] or list(self.apps)
        await self.apps[max(usable, key=SCOPES.index)](scope, receive, send)


def http_endpoint(
    servers: Mapping[Scope, RagmeshMCP] | RagmeshMCP, settings: GatewaySettings, rate_limiter: RateLimiter | None = None
) -> ASGIApp:
    """The streamable-HTTP ASGI app for /mcp behind the API-key check. Run each server's
    `session_manager.run()` for as long as it serves (the gateway's lifespan does)."""
    if isinstance(servers, RagmeshMCP):
        servers = {"read" if settings.mcp_read_only else "admin": servers}
    apps: dict[Scope, ASGIApp] = {}
    for scope, server in servers.items():
        # Builds the session manager; on a loopback host it also turns on DNS-rebinding protection. Stateless:
        # no Mcp-Session-Id is issued, each request is served whole by whichever replica gets it, so a 1.x-SDK
        # client works behind any load balancer (docs/decisions/mcp-behind-a-load-balancer.md).
        server.streamable_http_app(
            streamable_http_path="/mcp",
            host=settings.http_host,
            max_request_body_size=settings.max_upload_bytes,
            stateless_http=True,
        )
        apps[scope] = StreamableHTTPASGIApp(server.session_manager)
    limiter = rate_limiter or RateLimiter(settings.rate_limit_per_second, settings.rate_limit_burst)
    return ApiKeyGuard(apps, settings, limiter)


# --- stdio: `ragmesh mcp` -------------------------------------------------------------------------------------
async def serve_stdio(settings: GatewaySettings) -> None:
    """Serve the tools over stdin/stdout against a running mesh (RAGMESH_*_ADDR); logs go to stderr."""
    log_to_stderr()
    clients = MeshClients(settings)
    log.info(
        "serving MCP over stdio",
        extra={"read_only": settings.mcp_read_only, "search": settings.search_addr, "indexer": settings.indexer_addr},
    )
    try:
        await build_mcp(settings, lambda: clients).run_stdio_async()
    finally:
        await clients.close()
