"""Request and response models of the REST API; the client layer returns the response models, so REST
routes and MCP tools hand out the same data."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.config import JsonDict
from ragmesh_common import validation

from .errors import ErrorObject

_SCALAR_TYPES = (str, int, float, bool)
_SCALAR_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALAR_TYPES) and not (isinstance(value, float) and not math.isfinite(value))


def _scalar(value: Any) -> Any:
    if not _is_scalar(value):
        raise ValueError("must be a string, finite number or boolean")
    return value


def _scalar_or_list(value: Any) -> Any:
    if not (_is_scalar(value) or (isinstance(value, list) and all(_is_scalar(v) for v in value))):
        raise ValueError("must be a string, finite number, boolean or a list of them")
    return value


# One clear error per bad value (a plain union would report one error per member type).
MetadataValue = Annotated[Any, AfterValidator(_scalar), WithJsonSchema(_SCALAR_SCHEMA)]
# Keys follow the shared rule; the schema states it, the shared check enforces it (METADATA_INVALID).
MetadataDict = Annotated[
    dict[str, MetadataValue],
    WithJsonSchema(
        {
            "type": "object",
            "patternProperties": {validation.METADATA_KEY_RE.pattern: _SCALAR_SCHEMA},
            "additionalProperties": False,
        }
    ),
]
_FILTER_VALUE_SCHEMA = {"anyOf": [*_SCALAR_SCHEMA["anyOf"], {"type": "array", "items": _SCALAR_SCHEMA, "minItems": 1}]}
FilterValue = Annotated[Any, AfterValidator(_scalar_or_list), WithJsonSchema(_FILTER_VALUE_SCHEMA)]
# Chunk fields take strings; metadata keys any scalar; a list matches any of its values (the search service's
# FILTER_INVALID enforces it).
Filters = Annotated[
    dict[str, FilterValue],
    WithJsonSchema(
        {
            "type": "object",
            "properties": {
                name: {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
                for name in validation.CHUNK_FILTER_FIELDS
            },
            "patternProperties": {validation.METADATA_KEY_RE.pattern: _FILTER_VALUE_SCHEMA},
            "additionalProperties": False,
        }
    ),
]


# The schema states the rules exactly; the client layer checks them with the shared rules (ragmesh_common.validation),
# so a violation gets the same specific reason (COLLECTION_NAME_INVALID, DOCUMENT_ID_INVALID) as from a service,
# with the field's full path.
CollectionName = Annotated[
    str,
    WithJsonSchema(
        {"type": "string", "pattern": validation.COLLECTION_NAME_RE.pattern, "minLength": 1, "maxLength": 63}
    ),
]
DocId = Annotated[
    str,
    WithJsonSchema(
        {
            "type": "string",
            "pattern": validation.DOC_ID_PATTERN,
            "minLength": 1,
            "maxLength": validation.DOC_ID_MAX_CHARS,
        }
    ),
]
# http(s) URLs with a host; the converter decides what it may fetch (SSRF rules) and what it can read.
_HOST = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?::(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?"
HTTP_URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:{_HOST}|\[[0-9A-Fa-f:.]+\]){_PORT}(?:[/?#][!-~]*)?$"
HttpUrl = Annotated[
    str,
    Field(min_length=1, max_length=2048, pattern=HTTP_URL_PATTERN, description="An http(s) URL."),
    WithJsonSchema({"type": "string", "format": "uri", "pattern": HTTP_URL_PATTERN, "minLength": 1, "maxLength": 2048}),
]
# JSON Schema's integer includes 226.0 (a number with no fraction); strict mode alone would refuse it.
WholeNumber = Annotated[int, BeforeValidator(lambda v: int(v) if isinstance(v, float) and v.is_integer() else v)]
SearchModeName = Literal["hybrid", "dense", "sparse", "semantic", "keyword"]
FusionName = Literal["adaptive", "relative_score", "rrf", "dbsf"]

_TEXT_MAX_CHARS = 10_000_000
_BATCH_MAX_DOCUMENTS = 1000
# The search service's default limit (RAGMESH_SEARCH_MAX_QUERY_CHARS); the contract states it.
_QUERY_MAX_CHARS = 2000

# Request bodies: no unknown fields, and no coercion (false is not 0, "5" is not 5), as the schema says.
_Strict = ConfigDict(extra="forbid", strict=True)


# --- requests ------------------------------------------------------------------------------------------
class IngestTextRequest(BaseModel):
    """One text or Markdown document to ingest."""

    model_config = _Strict

    text: str = Field(
        min_length=1,
        max_length=_TEXT_MAX_CHARS,
        description="Plain text or Markdown (not blank).",
        json_schema_extra={"pattern": validation.NOT_BLANK_PATTERN},
    )
    collection: CollectionName = Field("default", description="Target collection, ^[a-z0-9][a-z0-9_-]{0,62}$.")
    doc_id: DocId | None = Field(None, description="Document id; derived from the content's hash when omitted.")
    title: str | None = Field(None, description="Document title.")
    metadata: MetadataDict = Field(
        default_factory=dict, description="Flat user metadata (key -> string, number or boolean); filterable."
    )


class BatchDocument(BaseModel):
    """One document of a batch."""

    model_config = _Strict

    text: str = Field(min_length=1, max_length=_TEXT_MAX_CHARS)
    doc_id: DocId | None = None
    title: str | None = None
    metadata: MetadataDict = Field(default_factory=dict)


class IngestBatchRequest(BaseModel):
    """Several documents for one collection, ingested by one streaming call."""

    model_config = _Strict

    collection: CollectionName = "default"
    documents: list[BatchDocument] = Field(min_length=1, max_length=_BATCH_MAX_DOCUMENTS)


class IngestUrlRequest(BaseModel):
    """A web page or file to fetch, convert and ingest."""

    model_config = _Strict

    url: HttpUrl
    collection: CollectionName = "default"
    doc_id: DocId | None = None
    title: str | None = None
    metadata: MetadataDict = Field(default_factory=dict)


class ConvertUrlRequest(BaseModel):
    """A web page or file to fetch and convert to Markdown."""

    model_config = _Strict

    url: HttpUrl


def blank_is_omitted(schema: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """The schema of a multipart form field as it is read: an empty value is the same as leaving the field out
    (a browser sends a blank input so, and FastAPI reads form fields so)."""
    outer: dict[str, Any] = {key: schema[key] for key in ("title", "default") if key in schema}
    inner = {key: value for key, value in schema.items() if key not in ("title", "default", "description")}
    text = description or schema.get("description", "")
    return {
        **outer,
        "anyOf": [inner, {"type": "string", "maxLength": 0}],
        "description": f"{text} An empty value is the same as leaving it out.".strip(),
    }


def multipart_body(
    file_description: str, fields: dict[str, Any], encoding: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The OpenAPI requestBody of an upload as it is read: a multipart form whose `file` part is required, with
    `fields` beside it (and `encoding`, where a part is not plain text)."""
    file = {"type": "string", "format": "binary", "description": file_description}
    form: dict[str, Any] = {"schema": {"type": "object", "required": ["file"], "properties": {"file": file, **fields}}}
    if encoding:
        form["encoding"] = encoding
    return {"required": True, "content": {"multipart/form-data": form}}


class _OverCollections(BaseModel):
    """A request over one collection (`collection`) or several (`collections`), never both."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"not": {"required": ["collection", "collections"]}}
    )

    collection: CollectionName | None = Field(None, description='One collection (default "default").')
    collections: list[CollectionName] | None = Field(
        None, min_length=1, max_length=32, description="Several collections."
    )

    @model_validator(mode="after")
    def _one_way_to_name_collections(self) -> _OverCollections:
        if {"collection", "collections"} <= self.model_fields_set:
            raise ValueError("give either `collection` or `collections`, not both")
        return self

    def collection_names(self) -> list[str]:
        if self.collections is not None:
            return self.collections
        return [self.collection if self.collection is not None else validation.DEFAULT_COLLECTION]


class SearchRequest(_OverCollections):
    """A query over one collection (`collection`) or several (`collections`, searched in parallel)."""

    query: str = Field(
        min_length=1,
        max_length=_QUERY_MAX_CHARS,
        description="The query text (not blank).",
        json_schema_extra={"pattern": validation.NOT_BLANK_PATTERN},
    )
    top_k: WholeNumber = Field(5, ge=1, le=100, description="How many results, 1..100.")
    mode: SearchModeName = Field(
        "hybrid",
        description=(
            "hybrid (dense + BM25, fused), dense, sparse, or the weighted-RRF presets semantic (dense-heavy) and "
            "keyword (BM25-heavy)."
        ),
    )
    fusion: FusionName | None = Field(
        None,
        description=(
            "How hybrid fuses dense and BM25 candidates: adaptive (per-query weights from each list's best match, "
            "with dense pseudo-relevance feedback), relative_score (min-max normalised scores, 0.75 dense + 0.25 "
            "BM25), rrf (reciprocal rank fusion) or dbsf (distribution-based score fusion); default: the "
            "collection's, else the search service's (adaptive)."
        ),
    )
    rrf_k: (
        Annotated[
            WholeNumber, Field(ge=1, le=10_000), WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 10_000})
        ]
        | None
    ) = Field(None, description="The k of reciprocal rank fusion (default 60).")
    filters: Filters = Field(
        default_factory=dict, description="Exact matches: field or metadata key -> value or list of values (any)."
    )
    group_by_document: bool = Field(False, description="At most one result (the best chunk) per document.")
    score_threshold: float | None = Field(None, allow_inf_nan=False, description="Drop results scoring below this.")


# --- responses -----------------------------------------------------------------------------------------
class IngestResult(BaseModel):
    """The outcome of ingesting one document."""

    status: Literal["indexed", "unchanged"] = Field(
        description="indexed: stored (new or changed); unchanged: same content already stored, nothing written."
    )
    doc_id: str
    chunks: int = Field(description="How many chunks the document has in the store.")
    collection: str
    title: str = ""
    mime_type: str = ""
    url: str = ""
    content_hash: str = ""


class IngestResponse(BaseModel):
    """The outcome of ingesting one document."""

    status: Literal["indexed", "unchanged"]
    doc_id: str
    chunks: int
    collection: str
    title: str = ""


class IngestFileResponse(IngestResponse):
    """The outcome of ingesting an uploaded file."""

    mime_type: str = Field("", description="The detected MIME type of the file.")


class IngestUrlResponse(IngestFileResponse):
    """The outcome of ingesting a URL."""

    url: str = Field("", description="The URL the document was fetched from, after redirects.")


class FailedIngest(BaseModel):
    """A document of a batch that could not be ingested; the other documents are not affected."""

    status: Literal["failed"] = "failed"
    doc_id: str = Field("", description="The document id from the request, if it had one.")
    error: ErrorObject


class IngestBatchResponse(BaseModel):
    """One result per document, in request order. The response is 200 even when some documents failed:
    check each result's `status`."""

    results: list[IngestResponse | FailedIngest]


class ConvertResponse(BaseModel):
    """A document converted to Markdown."""

    markdown: str
    title: str
    mime_type: str
    size_bytes: int = 0
    url: str = ""
    filename: str = ""


class SourceLocation(BaseModel):
    """Where a chunk lies in the file it came from."""

    path: str = Field(description="The file's path relative to the folder it was indexed from.")
    language: str = Field(description='A programming language ("python", "go", ...), "markdown" or "text".')
    start_line: int = Field(description="The chunk's first line, from 1.")
    end_line: int = Field(description="The chunk's last line, inclusive.")


class SearchHit(BaseModel):
    """One matching chunk."""

    doc_id: str
    chunk_id: str
    chunk_index: int
    text: str
    score: float
    title: str = ""
    collection: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str = ""
    filename: str = ""
    url: str = ""
    mime_type: str = ""
    location: SourceLocation | None = Field(None, description="For documents read from files: where it lies.")


class SearchResponse(BaseModel):
    """The results, best first."""

    query: str
    mode: SearchModeName
    fusion: FusionName | None = Field(None, description="The fusion hybrid search used (null for dense, sparse).")
    results: list[SearchHit]
    took_ms: float = Field(0.0, description="Time spent in the gateway and behind it, in milliseconds.")
    versions: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "The version of each collection searched that answered: collection -> version (every result of a "
            "collection comes from that one version)."
        ),
    )


class Chunk(BaseModel):
    chunk_id: str
    chunk_index: int
    text: str
    location: SourceLocation | None = None


class Document(BaseModel):
    """A whole document: its chunks in order and their text joined."""

    doc_id: str
    collection: str
    title: str = ""
    text: str
    chunks: list[Chunk]
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str = ""
    filename: str = ""
    url: str = ""
    mime_type: str = ""
    content_hash: str = ""
    ingested_at: str = ""


class DeleteDocumentResponse(BaseModel):
    deleted: int = Field(description="How many chunks were deleted.")


VersionStateName = Literal["active", "building", "previous"]


class CollectionVersion(BaseModel):
    """One version of a collection: its own index, built with its own embedding model and chunking."""

    version: int = Field(description="The version number, from 1.")
    state: VersionStateName = Field(
        description=("active (searched), building (a re-index job writes it) or previous (kept for a rollback).")
    )
    settings: IndexSettings | None = Field(
        None,
        description=(
            "What it was built with; null for a version 1 made before versions were recorded (the indexer's "
            "configured settings)."
        ),
    )
    created_at: str = Field("", description="When it was created (ISO 8601, UTC).")
    retained_until: str = Field(
        "", description=("Until when a previous version is kept for a rollback (ISO 8601, UTC); empty for the others.")
    )
    job_id: str = Field("", description="The re-index job that built it; empty for version 1.")
    documents: int = Field(description="Its documents.")
    chunks: int = Field(description="Its chunks.")


class CollectionInfo(BaseModel):
    name: str
    documents: int = Field(description="Documents in its active version.")
    chunks: int = Field(description="Chunks in its active version.")
    version: int = Field(1, description="The version searches and ingests use (1 until it is first re-indexed).")
    versions: list[CollectionVersion] = Field(
        default_factory=list,
        description=("Every version it keeps: the active one, one being built, the one it replaced."),
    )


class CollectionsResponse(BaseModel):
    collections: list[CollectionInfo]


class DeleteCollectionResponse(BaseModel):
    name: str
    deleted: int = Field(description="How many chunks were deleted with the collection.")


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"
    services: dict[str, str] = Field(description="Service -> SERVING.")


# --- jobs ----------------------------------------------------------------------------------------------
JobStateName = Literal["queued", "running", "done", "failed", "cancelled", "rejected"]


# A job's source: exactly one of these, stated in the schema (each alternative requires its own field as a
# non-null value, so a body naming two of them, or none, matches no alternative or two).
_ONE_SOURCE: JsonDict = {
    "oneOf": [
        {"required": [name], "properties": {name: {"type": kind}}}
        for name, kind in (("urls", "array"), ("documents", "array"), ("folder", "string"))
    ]
}
JOB_ID_PATTERN = r"^[0-9a-f]{32}$"
_MAX_FRESH_FOR_SECONDS = 100 * 365 * 24 * 3600  # the indexer's limit (100 years)
JobId = Annotated[
    str,
    Field(pattern=JOB_ID_PATTERN, description="A job's id (32 hex digits)."),
    WithJsonSchema({"type": "string", "pattern": JOB_ID_PATTERN}),
]


class CreateJobRequest(BaseModel):
    """A bulk ingestion job: exactly one of `urls`, `documents` and `folder` (archives: POST /jobs/archive)."""

    model_config = ConfigDict(**_Strict, json_schema_extra=_ONE_SOURCE)

    collection: CollectionName = Field("default", description="Target collection, ^[a-z0-9][a-z0-9_-]{0,62}$.")
    urls: list[HttpUrl] | None = Field(None, min_length=1, max_length=10_000, description="http(s) URLs to ingest.")
    documents: list[BatchDocument] | None = Field(None, min_length=1, max_length=10_000, description="Texts to ingest.")
    folder: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description=(
            "A folder on the indexer's machine, under RAGMESH_INDEXER_ROOTS; .gitignore/.ragmeshignore and the "
            "default skips apply, secrets are never read."
        ),
    )
    prune: bool = Field(False, description="Folder: delete documents whose files are gone from the folder.")
    fresh_for_seconds: Annotated[
        WholeNumber,
        Field(ge=0, le=_MAX_FRESH_FOR_SECONDS),
        WithJsonSchema({"type": "integer", "minimum": 0, "maximum": _MAX_FRESH_FOR_SECONDS}),
    ] = Field(
        0,
        description=(
            "Folder or URLs: how long the documents stay fresh (then `sync` re-runs the datasource and they can "
            "be pruned as expired); 0: forever."
        ),
    )

    @model_validator(mode="after")
    def _one_source(self) -> CreateJobRequest:
        given = [name for name in ("urls", "documents", "folder") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of `urls`, `documents` and `folder`")
        return self


class JobDocumentError(BaseModel):
    document: str = Field(description="The document: its path, URL or id.")
    error: ErrorObject


class SkippedFile(BaseModel):
    path: str
    reason: str = Field(description="SECRET, BINARY, TOO_LARGE, EMPTY, SYMLINK_OUTSIDE, UNREADABLE, ...")


class Job(BaseModel):
    """A bulk ingestion job and its progress. A failed document never fails the job: see `errors`."""

    job_id: str
    collection: str
    state: JobStateName
    kind: str = Field(description="folder, urls, documents, archive or reindex.")
    source: str = ""
    total: int = Field(description="Documents in the job.")
    indexed: int = 0
    unchanged: int = 0
    failed: int = 0
    skipped: int = Field(0, description="Files skipped before ingestion (see skipped_files).")
    deleted: int = Field(0, description="Documents deleted because their files are gone (prune).")
    bytes: int = 0
    errors: list[JobDocumentError] = Field(default_factory=list)
    skipped_files: list[SkippedFile] = Field(default_factory=list)
    created_at: str = ""
    started_at: str = ""
    finished_at: str = ""
    documents_per_second: float = 0.0
    bytes_per_second: float = 0.0
    datasource_id: str = ""
    prune: bool = False
    error: str = ""
    reindex: ReindexInfo | None = Field(
        None,
        description=(
            'For a re-index (kind "reindex"): the versions, the new settings and the gate\'s decision with both scores.'
        ),
    )


class JobAccepted(BaseModel):
    """A queued job; follow it with GET /api/v1/jobs/{job_id}."""

    job_id: str
    job: Job


class JobsResponse(BaseModel):
    jobs: list[Job]


class Datasource(BaseModel):
    """A folder or URL list synced into a collection: a folder on the indexer's machine ("folder"), on a client's
    ("manifest": `ragmesh sync` on that host re-sends it), or a URL list ("urls")."""

    datasource_id: str
    collection: str
    kind: Literal["folder", "manifest", "urls"]
    folder: str = ""
    host: str = Field("", description="For a manifest: the machine that has the folder.")
    urls: list[str] = Field(default_factory=list)
    prune: bool = False
    fresh_for_seconds: int = 0
    fresh_until: str = ""
    last_job_id: str = ""
    last_synced_at: str = ""
    due: bool = Field(description="Whether a sync would re-run it now.")


class DatasourcesResponse(BaseModel):
    datasources: list[Datasource]


class SyncRequest(BaseModel):
    model_config = _Strict

    collection: CollectionName | None = Field(None, description="Only this collection's datasources.")
    all: bool = Field(False, description="Re-run every datasource, not only those that are due.")


class ExpiredDocument(BaseModel):
    doc_id: str
    fresh_until: str
    datasource_id: str = ""


class ExpiredDocumentsResponse(BaseModel):
    documents: list[ExpiredDocument]


class PruneExpiredResponse(BaseModel):
    deleted: list[str] = Field(description="The doc_ids deleted.")


# --- answers and sessions ----------------------------------------------------------------------------------
_ASK_MAX_CHARS = 1000
_ASK_MAX_TOP_K = 50


SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"  # the answer service's rule
# Stated in the schema; checked by the answer service, so a bad one gets its own reason (SESSION_ID_INVALID).
SessionId = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": SESSION_ID_PATTERN, "description": "A conversation's id."})
]


class AskRequest(_OverCollections):
    """A question over one collection (`collection`) or several (`collections`)."""

    query: str = Field(
        min_length=1,
        max_length=_ASK_MAX_CHARS,
        description="The question, 1..1000 characters.",
        json_schema_extra={"pattern": validation.NOT_BLANK_PATTERN},
    )
    top_k: WholeNumber = Field(
        5, ge=1, le=_ASK_MAX_TOP_K, description="How many chunks to retrieve for the context, 1..50."
    )
    filters: Filters = Field(
        default_factory=dict, description="Exact matches on chunk fields or metadata, as in /api/v1/search."
    )
    session_id: SessionId | None = Field(
        None,
        description=(
            "Continue a conversation: a follow-up is rewritten with its earlier turns before retrieval. Omitted: a "
            "new conversation, whose id the answer carries. 1-128 characters A-Z a-z 0-9 _ . : -"
        ),
    )
    stream: bool = Field(
        False,
        description=(
            'Stream Server-Sent Events (as does `Accept: text/event-stream`): `token` events {"text"} as the '
            "answer is written, then one `done` event with the whole response; a failure after the stream started "
            "is an `error` event with the error body."
        ),
    )


class AskSource(BaseModel):
    """A document the answer was written from; the answer cites it as [number]."""

    number: int = Field(description="The source's number in the context, from 1; cited in the answer as [number].")
    doc_id: str
    collection: str
    title: str = ""
    url: str = ""
    filename: str = ""
    cited: bool = Field(description="Whether the answer cites this source (cited ones are listed first).")
    snippet: str = Field("", description="The best-matching chunk, at most 300 characters.")
    relevance_score: float = Field(0.0, description="The best relevance of the document's chunks, 0..1.")


class MatchedChunk(BaseModel):
    """A retrieved chunk the context was built from."""

    chunk_id: str
    doc_id: str
    collection: str
    chunk_index: int
    text: str
    relevance_score: float = Field(description="How relevant the chunk is to the question, 0..1.")
    source: int = Field(description="The number of the chunk's document among the sources.")


class AnswerUsage(BaseModel):
    """Tokens the chat model read and wrote for this answer (rewriting a follow-up included)."""

    input_tokens: int = 0
    output_tokens: int = Field(0, description="For an extractive answer, its words.")


class AskResponse(BaseModel):
    """An answer with its sources: `answer` cites them by number ([1]); `sources` lists the cited ones first."""

    answer: str
    sources: list[AskSource]
    matched_chunks: list[MatchedChunk] = Field(description="The retrieved chunks, best first.")
    session_id: str = Field(description="The conversation's id: send it with a follow-up question.")
    generator: Literal["model", "extractive"] = Field(
        description=(
            "model: a chat model wrote the answer; extractive: no chat model is configured, the answer is the "
            "retrieved sentences closest to the question, each cited."
        )
    )
    model: str = Field("", description="The chat model's name (empty when extractive).")
    standalone_query: str = Field(description="The question as it was searched (a follow-up rewritten).")
    usage: AnswerUsage
    took_ms: float = Field(0.0, description="Time spent in the gateway and behind it, in milliseconds.")


class SessionTurn(BaseModel):
    """One question and its answer."""

    query: str
    standalone_query: str
    answer: str
    sources: list[AskSource]
    generator: Literal["model", "extractive"]
    created_at: str = Field(description="ISO 8601, UTC.")


class SessionResponse(BaseModel):
    """A conversation's stored turns, oldest first."""

    session_id: str
    turns: list[SessionTurn]


class DeleteSessionResponse(BaseModel):
    session_id: str
    deleted_turns: int = Field(description="How many turns were forgotten (0: there was no such session).")


# --- golden sets and evaluations ----------------------------------------------------------------------------
_GRADE_SCHEMA = {"type": "integer", "minimum": 0, "maximum": validation.GOLDEN_MAX_GRADE}
# doc_id -> grade; at least one grade above 0 (not every value 0). The search service enforces it (GOLDEN_*).
Judgments = Annotated[
    dict[str, WholeNumber],
    WithJsonSchema(
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": validation.GOLDEN_MAX_JUDGMENTS_PER_QUERY,
            "propertyNames": {
                "pattern": validation.DOC_ID_PATTERN,
                "minLength": 1,
                "maxLength": validation.DOC_ID_MAX_CHARS,
            },
            "additionalProperties": _GRADE_SCHEMA,
            "not": {"additionalProperties": {"const": 0}},
            "description": f"The judged documents: doc_id -> graded relevance, 0..{validation.GOLDEN_MAX_GRADE} "
            "(0: judged not relevant); at least one above 0, and each document graded above 0 must be in the "
            "collection.",
        }
    ),
]


class GoldenQuery(BaseModel):
    """One judged query: its text and the documents a good search finds for it."""

    model_config = _Strict

    query_id: str = Field(
        min_length=1,
        max_length=validation.GOLDEN_QUERY_ID_MAX_CHARS,
        description="The query's id, unique in the set (a BEIR query id).",
        json_schema_extra={"pattern": validation.NOT_BLANK_PATTERN},
    )
    text: str = Field(
        min_length=1,
        max_length=_QUERY_MAX_CHARS,
        description="The query text (not blank).",
        json_schema_extra={"pattern": validation.NOT_BLANK_PATTERN},
    )
    relevant: Judgments


class GoldenSetRequest(BaseModel):
    """A collection's golden set: the judged queries its search quality is measured on (BEIR queries + qrels)."""

    model_config = _Strict

    queries: list[GoldenQuery] = Field(
        min_length=1,
        max_length=validation.GOLDEN_MAX_QUERIES,
        json_schema_extra={"uniqueItems": True},
        description=f"1..{validation.GOLDEN_MAX_QUERIES} queries with distinct query_id, at most "
        f"{validation.GOLDEN_MAX_JUDGMENTS} judgments in all.",
    )


class GoldenSetSummary(BaseModel):
    """The stored golden set, in numbers."""

    collection: str
    queries: int
    judgments: int = Field(description="(query, document, grade) judgments in the set.")
    updated_at: str = Field(description="When the set was stored (ISO 8601, UTC).")
    golden_set_id: str = Field(description="A fingerprint of the set's content; evaluations name it.")


class GoldenSetResponse(BaseModel):
    """A collection's golden set."""

    collection: str
    queries: list[GoldenQuery]
    updated_at: str
    golden_set_id: str


class DeleteGoldenSetResponse(BaseModel):
    collection: str
    deleted_queries: int = Field(description="How many queries the removed set held.")


_MAX_VERSION = 2**31 - 1


class EvaluateRequest(BaseModel):
    """Which search modes to score (default: the search service's default mode), and which version."""

    model_config = _Strict

    modes: list[SearchModeName] | None = Field(
        None,
        min_length=1,
        max_length=5,
        json_schema_extra={"uniqueItems": True},
        description="Modes to score, each once.",
    )
    version: (
        Annotated[
            WholeNumber,
            Field(ge=1, le=_MAX_VERSION),
            WithJsonSchema({"type": "integer", "minimum": 1, "maximum": _MAX_VERSION}),
        ]
        | None
    ) = Field(
        None,
        description=(
            "The version to score (GET /api/v1/collections lists them); default: the active one. Scoring another "
            "version (one a re-index is building, or the one kept for a rollback) adds nothing to the history or the "
            "exported metrics; 404 VERSION_NOT_FOUND for a version the collection does not keep."
        ),
    )

    @model_validator(mode="after")
    def _each_mode_once(self) -> EvaluateRequest:
        if self.modes is not None and len(set(self.modes)) != len(self.modes):
            raise ValueError("name each mode once")
        return self


class Evaluation(BaseModel):
    """One scoring of a collection's index on its golden set in one mode: means over the golden queries of the
    document ranking (best chunk per document), as `ragmesh eval` scores it."""

    collection: str
    evaluated_at: str = Field(description="ISO 8601, UTC.")
    mode: SearchModeName
    fusion: FusionName | None = Field(None, description="The fusion hybrid search used (null for dense, sparse).")
    queries: int = Field(description="Golden queries scored.")
    ndcg_at_10: float
    recall_at_10: float
    mrr_at_10: float
    documents: int = Field(description="Documents in the collection when it was scored.")
    chunks: int = Field(description="Chunks in the collection when it was scored.")
    model: str = Field("", description="The embedding model that embedded the queries (empty for sparse).")
    golden_set_id: str = Field(description="The golden set it was scored on.")
    took_ms: float = Field(description="How long scoring took.")
    version: int = Field(0, description="The version of the collection that was scored.")


class EvaluationsResponse(BaseModel):
    """Evaluations, oldest first."""

    collection: str
    evaluations: list[Evaluation]


# --- versions and re-indexing ----------------------------------------------------------------------------
class IndexSettings(BaseModel):
    """What decides a collection version's vectors: the embedding model and the chunking."""

    model: str = Field("", description="The embedder's name for the model; empty: its default model.")
    model_id: str = Field("", description="The model's id, as the embedder reports it.")
    dimension: int = Field(0, description="The dimension of its dense vectors.")
    sparse_model_id: str = Field("", description="The sparse (BM25) model's id.")
    chunk_tokens: int = Field(0, description="Largest chunk, in model tokens.")
    chunk_overlap_tokens: int = Field(0, description="Tokens shared by consecutive chunks.")
    chunker_fingerprint: str = Field(
        "",
        description=("A fingerprint of everything that decides chunk boundaries (chunker version, sizes, tokenizer)."),
    )


ReindexDecision = Literal["switched", "rejected", "forced", "no_golden_set"]


class ReindexInfo(BaseModel):
    """A re-index job's versions, settings and gate."""

    from_version: int = Field(description="The version searches used when the job started.")
    to_version: int = Field(description="The version the job builds.")
    settings: IndexSettings = Field(description="The new version's settings.")
    tolerance: float = Field(description="How much lower the new version's nDCG@10 may be than the current one's.")
    force: bool = Field(description="Whether the switch is forced past the gate.")
    retention_seconds: int = Field(description="How long the replaced version is kept for a rollback.")
    decision: ReindexDecision | None = Field(
        None,
        description=(
            "The gate's decision once the new version is built: switched, rejected (worse by more than the "
            "tolerance; the collection keeps the current version), forced (switched past the gate) or no_golden_set "
            "(switched without a gate); null until then."
        ),
    )
    current: Evaluation | None = Field(
        None, description=("The current version scored on the golden set (null without a golden set, or until scored).")
    )
    candidate: Evaluation | None = Field(None, description="The new version scored on the golden set, same mode.")


# The embedder's rule for model names (RAGMESH_EMBEDDER_EXTRA_MODELS); GetModelInfo lists the ones it serves.
MODEL_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
CHUNK_TOKENS_MIN, CHUNK_TOKENS_MAX = 16, 8192
# Less than half of chunk_tokens, so at most this (the indexer checks it against the chunk_tokens in force).
_CHUNK_OVERLAP_MAX = CHUNK_TOKENS_MAX // 2 - 1
MAX_RETENTION_SECONDS = 365 * 24 * 3600  # the indexer's limit (a year)


class ReindexRequest(BaseModel):
    """The new version's settings; each one left out keeps the current version's. The gate's options."""

    model_config = _Strict

    chunk_tokens: (
        Annotated[
            WholeNumber,
            Field(ge=CHUNK_TOKENS_MIN, le=CHUNK_TOKENS_MAX),
            WithJsonSchema({"type": "integer", "minimum": CHUNK_TOKENS_MIN, "maximum": CHUNK_TOKENS_MAX}),
        ]
        | None
    ) = Field(
        None,
        description=f"Largest chunk in model tokens, {CHUNK_TOKENS_MIN}..{CHUNK_TOKENS_MAX} (capped by the "
        "model's window).",
    )
    chunk_overlap_tokens: (
        Annotated[
            WholeNumber,
            Field(ge=0, le=_CHUNK_OVERLAP_MAX),
            WithJsonSchema({"type": "integer", "minimum": 0, "maximum": _CHUNK_OVERLAP_MAX}),
        ]
        | None
    ) = Field(
        None,
        description="Tokens shared by consecutive chunks: less than half of chunk_tokens (400 "
        "CHUNK_OVERLAP_OUT_OF_RANGE otherwise).",
    )
    model: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=MODEL_NAME_PATTERN,
        description=(
            "The embedding model of the new version, by the embedder's name for it (see its GetModelInfo); default: "
            "the current version's."
        ),
    )
    tolerance: float | None = Field(
        None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description=(
            "How much lower the new version's nDCG@10 on the golden set may be than the current one's, 0..1; default: "
            "the indexer's (RAGMESH_INDEXER_REINDEX_TOLERANCE)."
        ),
    )
    force: bool = Field(False, description="Switch even when the gate finds the new version worse.")
    retention_seconds: (
        Annotated[
            WholeNumber,
            Field(ge=0, le=MAX_RETENTION_SECONDS),
            WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_RETENTION_SECONDS}),
        ]
        | None
    ) = Field(
        None,
        description="How long the replaced version is kept for a rollback, in seconds (at most a year); "
        "default: the indexer's.",
    )


class RollbackResponse(BaseModel):
    """The version a collection uses after a rollback."""

    collection: str
    version: int = Field(description="The version searches use now.")
    replaced_version: int = Field(
        description=("The version it replaced, kept in turn for a rollback until the retention passes.")
    )


# --- graph (RAGMESH_GRAPH_ENABLED) -----------------------------------------------------------------------
# The graph service's limits; the schema states them, the service enforces them (DEPTH_OUT_OF_RANGE, ...), so a
# value out of range gets the service's own reason.
GRAPH_MAX_DEPTH = 3
GRAPH_MAX_PATH_DEPTH = 6
GRAPH_MAX_NEIGHBOURS = 1000
GRAPH_MAX_QUERY_CHARS = 10_000
GRAPH_MAX_ROWS = 10_000
GRAPH_MAX_ENTITIES = 10_000
MAX_PROPERTY_CHARS = 1_000_000
# The graph service's rules (ragmesh_graph.service: TYPE_RE, RELATION_RE, check_entity_id).
ENTITY_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"
RELATION_TYPE_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
ENTITY_ID_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,63}/.+$"
ENTITY_ID_MAX_CHARS = 1024
ENTITY_ID_DESCRIPTION = (
    "The entity's id: '<type>/<primary key values joined by '/'>', e.g. 'Deployment/ragmesh/search' (a "
    "Kubernetes object is '<kind>/<namespace>/<name>', a container of a workload "
    "'Container/<namespace>/<workload>/<container>')."
)
Depth = Annotated[
    int,
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": GRAPH_MAX_DEPTH}),
    Field(description=f"Hops out from the start, 1..{GRAPH_MAX_DEPTH}."),
]
PathDepth = Annotated[
    int,
    WithJsonSchema({"type": "integer", "minimum": 1, "maximum": GRAPH_MAX_PATH_DEPTH}),
    Field(description=f"The longest path, in hops, 1..{GRAPH_MAX_PATH_DEPTH}."),
]
EntityTypeName = Annotated[
    str,
    WithJsonSchema({"type": "string", "pattern": ENTITY_TYPE_PATTERN, "minLength": 1, "maxLength": 64}),
    Field(description="An entity type, e.g. 'Deployment'."),
]
# As a path parameter the id is the rest of the path: its '/' cannot be required by a pattern of a parameter that
# clients (and schemathesis) encode as one segment, so the schema states its length; the graph service checks its
# shape (400 ENTITY_INVALID).
EntityId = Annotated[
    str,
    WithJsonSchema({"type": "string", "minLength": 3, "maxLength": ENTITY_ID_MAX_CHARS}),
    Field(description=ENTITY_ID_DESCRIPTION),
]
Direction = Literal["outgoing", "incoming"]
QueryTargetName = Literal["data", "ontology"]


class GraphRelation(BaseModel):
    """One relation of an entity, seen from it."""

    type: str = Field(description="The relation type, UPPER_SNAKE_CASE (SELECTS, USES, HAS...).")
    target_id: str = Field(description="The other entity's id.")
    target_type: str = Field("", description="The other entity's type.")
    direction: Direction = Field(description="outgoing: this entity -> the other; incoming: the other -> this one.")
    index: int | None = Field(None, description="For a HAS relation to a child from a list, its index there.")


class GraphEntity(BaseModel):
    """An entity (a node of the graph) with its properties and relations."""

    id: str = Field(description=ENTITY_ID_DESCRIPTION)
    type: str
    primary_key: dict[str, Any] = Field(description="The primary key properties, in order; their values make the id.")
    properties: dict[str, Any] = Field(default_factory=dict, description="The other properties (dot notation).")
    labels: list[str] = Field(default_factory=list)
    alternative_keys: list[str] = Field(default_factory=list)
    relations: list[GraphRelation] = Field(default_factory=list)
    parent_id: str = Field("", description="For a child entity (a Deployment's Container), its parent's id.")


class EntityType(BaseModel):
    """One entity type of a collection's graph."""

    name: str
    count: int = Field(description="How many entities of the type the graph holds.")
    properties: list[str] = Field(default_factory=list, description="The properties its entities have, sorted.")
    primary_key: list[str] = Field(default_factory=list, description="The primary key properties, in order.")


class TypeRelation(BaseModel):
    """A relation type between two entity types: (from_type)-[type]->(to_type)."""

    from_type: str
    type: str
    to_type: str
    count: int = Field(description="How many such relations the graph holds.")
    depth: int = Field(0, description="Hops from the explored type (ontology exploration), else 0.")


class GraphInfo(BaseModel):
    """A collection's graph: its entity types and the relation types between them."""

    collection: str
    entity_types: list[EntityType]
    relations: list[TypeRelation]
    entities: int = Field(description="Entities in all.")


class GraphTypesResponse(BaseModel):
    """What a collection holds: its datasources (synced folders, URL lists) and its graph's entity types."""

    collection: str
    datasources: list[Datasource]
    entity_types: list[EntityType] = Field(description="Empty when the collection has no graph.")
    relations: list[TypeRelation]
    entities: int


class OntologyResponse(BaseModel):
    """An entity type and the relation types within `depth` hops of it, nearest first."""

    entity_type: EntityType
    relations: list[TypeRelation]


class Neighbour(BaseModel):
    """An entity near the explored one."""

    id: str
    type: str
    relation: str = Field(description="The relation type of the hop that reached it.")
    direction: Direction = Field(
        description="Which way that relation points, seen from `via_id`: outgoing means via_id -> this entity."
    )
    depth: int = Field(description="Hops from the explored entity.")
    via_id: str = Field(description="The entity the hop came from (the explored one at depth 1).")


class ExploreResponse(BaseModel):
    """An entity and its neighbours within `depth` hops, nearest first."""

    entity: GraphEntity
    neighbours: list[Neighbour]
    truncated: bool = Field(description="True when there were more neighbours than `limit`.")


class TypePath(BaseModel):
    """One path of relation types between two entity types."""

    cypher: str = Field(description="In Cypher notation, e.g. '(:Service)-[:SELECTS]->(:Deployment)'.")
    hops: list[TypeRelation]


class PathsResponse(BaseModel):
    """Every shortest path (relations followed in either direction); empty when the types are not connected."""

    paths: list[TypePath]


class GraphQueryRequest(BaseModel):
    """One read-only Cypher statement."""

    model_config = _Strict

    query: str = Field(
        min_length=1,
        max_length=GRAPH_MAX_QUERY_CHARS,
        description="One Cypher statement that only reads, e.g. "
        '"MATCH (s:Service)-[:SELECTS]->(d:Deployment) RETURN s.id, d.id". A statement that writes is refused '
        "(403 QUERY_NOT_READ_ONLY).",
    )
    target: QueryTargetName = Field(
        "data",
        description="data: the entities; ontology: (:EntityType {name, count, properties})-[:RELATION {type, "
        "count}]->(:EntityType).",
    )
    parameters: dict[str, Any] | None = Field(None, description="Named parameters ($name in the query).")
    row_limit: (
        Annotated[
            WholeNumber,
            Field(ge=1, le=GRAPH_MAX_ROWS),
            WithJsonSchema({"type": "integer", "minimum": 1, "maximum": GRAPH_MAX_ROWS}),
        ]
        | None
    ) = Field(None, description="At most this many rows (default: the service's, 1000).")


class GraphQueryResponse(BaseModel):
    """The rows of a query, each a list of values in column order (nodes and relations as objects)."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = Field(description="True when the statement returned more than the row limit.")


class EntityRelationInput(BaseModel):
    """An explicit relation from an entity."""

    model_config = _Strict

    type: str = Field(
        min_length=1, max_length=64, pattern=RELATION_TYPE_PATTERN, description="The relation type, UPPER_SNAKE_CASE."
    )
    target_id: str = Field(
        min_length=3,
        max_length=ENTITY_ID_MAX_CHARS,
        pattern=ENTITY_ID_PATTERN,
        description="The id of the entity it points to.",
    )


class EntityInput(BaseModel):
    """One entity to ingest."""

    model_config = _Strict

    type: str = Field(
        min_length=1, max_length=64, pattern=ENTITY_TYPE_PATTERN, description="The entity type, e.g. 'Deployment'."
    )
    primary_key: list[str] = Field(
        min_length=1,
        max_length=16,
        description="The properties whose values make the id, in order (dot notation into nested ones).",
    )
    properties: dict[str, Any] = Field(
        description="The properties; nested objects are flattened (spec.replicas), lists of objects become "
        "child entities."
    )
    labels: list[str] = Field(default_factory=list, max_length=64)
    alternative_keys: list[str] = Field(default_factory=list, max_length=64)
    relations: list[EntityRelationInput] = Field(default_factory=list, max_length=10_000)


class GraphIngestRequest(BaseModel):
    """Entities to store in a collection's graph and as searchable documents (dual storage)."""

    model_config = _Strict

    entities: list[EntityInput] = Field(min_length=1, max_length=GRAPH_MAX_ENTITIES)
    max_property_chars: (
        Annotated[
            WholeNumber,
            Field(ge=1, le=MAX_PROPERTY_CHARS),
            WithJsonSchema({"type": "integer", "minimum": 1, "maximum": MAX_PROPERTY_CHARS}),
        ]
        | None
    ) = Field(None, description="Longer properties stay out of the graph, in the text only (default 250).")


class GraphIngestResponse(BaseModel):
    """What was stored."""

    entities: int = Field(description="Entities stored (child entities included).")
    relations: int
    entity_types: dict[str, int] = Field(description="Entities per type.")
    relation_types: dict[str, int] = Field(description="Relations per relation type.")
    entity_ids: list[str]
    dangling_relations: list[str] = Field(
        description="Relations not stored: their target is in neither the request nor the graph."
    )
    omitted_properties: list[str] = Field(description="Properties kept out of the graph for their length.")


class DeleteEntitiesResponse(BaseModel):
    deleted_ids: list[str] = Field(description="The entities deleted, child entities included.")
