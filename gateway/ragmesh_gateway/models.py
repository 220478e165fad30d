"""Request and response models of the REST API; the client layer returns the response models, so REST
routes and MCP tools hand out the same data."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

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
FilterValue = Annotated[
    Any, AfterValidator(_scalar_or_list),
    WithJsonSchema({"anyOf": [*_SCALAR_SCHEMA["anyOf"], {"type": "array", "items": _SCALAR_SCHEMA}]}),
]
SearchModeName = Literal["hybrid", "dense", "sparse", "semantic", "keyword"]
FusionName = Literal["relative_score", "rrf", "dbsf"]

_TEXT_MAX_CHARS = 10_000_000
_URL_MAX_CHARS = 2048
_BATCH_MAX_DOCUMENTS = 1000
_QUERY_MAX_CHARS = 8192

_Strict = ConfigDict(extra="forbid")


# --- requests ------------------------------------------------------------------------------------------
class IngestTextRequest(BaseModel):
    """One text or Markdown document to ingest."""

    model_config = _Strict

    text: str = Field(min_length=1, max_length=_TEXT_MAX_CHARS, description="Plain text or Markdown.")
    collection: str = Field("default", description="Target collection, ^[a-z0-9][a-z0-9_-]{0,62}$.")
    doc_id: str | None = Field(None, description="Document id; derived from the content's hash when omitted.")
    title: str | None = Field(None, description="Document title.")
    metadata: dict[str, MetadataValue] = Field(
        default_factory=dict, description="Flat user metadata (key -> string, number or boolean); filterable."
    )


class BatchDocument(BaseModel):
    """One document of a batch."""

    model_config = _Strict

    text: str = Field(min_length=1, max_length=_TEXT_MAX_CHARS)
    doc_id: str | None = None
    title: str | None = None
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)


class IngestBatchRequest(BaseModel):
    """Several documents for one collection, ingested by one streaming call."""

    model_config = _Strict

    collection: str = "default"
    documents: list[BatchDocument] = Field(min_length=1, max_length=_BATCH_MAX_DOCUMENTS)


class IngestUrlRequest(BaseModel):
    """A web page or file to fetch, convert and ingest."""

    model_config = _Strict

    url: str = Field(min_length=1, max_length=_URL_MAX_CHARS, description="An http(s) URL.")
    collection: str = "default"
    doc_id: str | None = None
    title: str | None = None
    metadata: dict[str, MetadataValue] = Field(default_factory=dict)


class ConvertUrlRequest(BaseModel):
    """A web page or file to fetch and convert to Markdown."""

    model_config = _Strict

    url: str = Field(min_length=1, max_length=_URL_MAX_CHARS, description="An http(s) URL.")


class SearchRequest(BaseModel):
    """A query over one collection (`collection`) or several (`collections`, searched in parallel)."""

    model_config = _Strict

    query: str = Field(min_length=1, max_length=_QUERY_MAX_CHARS, description="The query text.")
    collection: str | None = Field(None, description='One collection (default "default").')
    collections: list[str] | None = Field(None, min_length=1, max_length=32, description="Several collections.")
    top_k: int = Field(5, ge=1, le=100, description="How many results, 1..100.")
    mode: SearchModeName = Field("hybrid", description=(
        "hybrid (dense + BM25, fused), dense, sparse, or the weighted-RRF presets semantic (dense-heavy) and "
        "keyword (BM25-heavy)."))
    fusion: FusionName | None = Field(None, description=(
        "How hybrid fuses dense and BM25 candidates: relative_score (min-max normalised scores, 0.75 dense + "
        "0.25 BM25), rrf (reciprocal rank fusion) or dbsf (distribution-based score fusion); default: the "
        "collection's, else the search service's (relative_score)."))
    rrf_k: int | None = Field(None, ge=1, le=10_000, description="The k of reciprocal rank fusion (default 60).")
    filters: dict[str, FilterValue] = Field(
        default_factory=dict, description="Exact matches: field or metadata key -> value or list of values (any)."
    )
    group_by_document: bool = Field(False, description="At most one result (the best chunk) per document.")
    score_threshold: float | None = Field(None, allow_inf_nan=False, description="Drop results scoring below this.")

    @model_validator(mode="after")
    def _one_way_to_name_collections(self) -> SearchRequest:
        if self.collection is not None and self.collections is not None:
            raise ValueError("give either `collection` or `collections`, not both")
        return self

    def collection_names(self) -> list[str]:
        return self.collections or [self.collection or "default"]


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


class SearchResponse(BaseModel):
    """The results, best first."""

    query: str
    mode: SearchModeName
    fusion: FusionName | None = Field(None, description="The fusion hybrid search used (null for dense, sparse).")
    results: list[SearchHit]
    took_ms: float = Field(0.0, description="Time spent in the gateway and behind it, in milliseconds.")


class Chunk(BaseModel):
    chunk_id: str
    chunk_index: int
    text: str


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


class CollectionInfo(BaseModel):
    name: str
    documents: int
    chunks: int


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
