"""The one small storage interface over Qdrant. Two adapters implement it: `EdgeStore` (embedded
qdrant-edge-py, the default) and `QdrantClientStore` (qdrant-client against QDRANT_URL). One contract
test suite (libs/store/tests/test_store_contract.py) runs against both.

Every method is synchronous and thread-safe; async services call them through `asyncio.to_thread`.
A collection holds chunk points with a named dense vector "dense" (cosine) and a named sparse vector
"bm25" (IDF modifier), and keyword/integer payload indexes on the fields filters use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

DENSE = "dense"
SPARSE = "bm25"
# Payload fields every chunk carries; the keyword-like ones get a payload index.
KEYWORD_FIELDS = (
    "doc_id",
    "source",
    "filename",
    "mime_type",
    "url",
    "title",
    "content_hash",
    "language",
    "path",
    "path_prefixes",
    "datasource",
)
INTEGER_FIELDS = ("chunk_index",)
METADATA_PREFIX = "metadata."  # user metadata lives under payload["metadata"]
# A filter on "path_prefix" matches the folders a document's path lies in: each chunk of a file stored under a
# path carries the list of its ancestor folders ("a", "a/b" for "a/b/c.py") in "path_prefixes", so a prefix
# filter is an exact match on one of them (keyword-indexed, no scan).
PATH_PREFIX_FILTER = "path_prefix"
PATH_PREFIXES_FIELD = "path_prefixes"
# The keys of collection records (`Store.set_collection_record`).
RECORD_KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

Mode = Literal["dense", "sparse", "hybrid"]
Fusion = Literal["rrf", "dbsf", "relative_score", "adaptive"]
FilterValue = str | int | float | bool | Sequence[str | int | float | bool]


@dataclass(frozen=True)
class Sparse:
    indices: Sequence[int]
    values: Sequence[float]


@dataclass(frozen=True)
class ChunkPoint:
    """One chunk to store. `id` is its point id as a string: a number in decimal (the indexer's are below 2^63, made
    from doc_id + chunk_index) or a UUID (see `_common.engine_id`)."""

    id: str
    dense: Sequence[float]
    sparse: Sparse
    payload: Mapping[str, Any]


class Hit(NamedTuple):
    """A scored chunk. A named tuple, not a frozen dataclass: an adaptive hybrid search builds ~300 of them, and a
    frozen dataclass's `__init__` (one `object.__setattr__` per field) costs twice a tuple's construction."""

    id: str
    score: float
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class Query:
    """A search. `filters` are exact matches: payload field (or `metadata.<key>`) -> value or list of values
    (any of them). Hybrid prefetches `prefetch_limit` candidates per vector (at least `limit`) and fuses them
    with `fusion`: "rrf" (reciprocal rank fusion with `rrf_k`, and `rrf_weights` = (dense, sparse) weights,
    equal when None), "dbsf" (distribution-based score fusion) or "relative_score" (each list min-max
    normalised, then `dense_weight` * dense + (1 - dense_weight) * sparse; scores 0..1)."""

    mode: Mode
    limit: int
    dense: Sequence[float] | None = None
    sparse: Sparse | None = None
    filters: Mapping[str, FilterValue] = field(default_factory=dict)
    prefetch_limit: int = 50
    rrf_k: int = 60
    fusion: Fusion = "rrf"
    rrf_weights: tuple[float, float] | None = None
    dense_weight: float = 0.75
    score_threshold: float | None = None


@dataclass(frozen=True)
class HybridEvidence:
    """Everything one hybrid query (`Store.hybrid_evidence`, one store call) tells about its candidates,
    for fusions that weigh each list per query (the search service's adaptive fusion):

    - `dense` / `sparse`: each list's best `max(prefetch_limit, limit)` chunks, best first, without payloads
      (reading payloads costs more than the search; `Store.payloads` fetches those of the chunks kept);
    - `dense_scores` / `sparse_scores`: the cosine and the BM25 score of every candidate of either list (a chunk
      missing from `sparse_scores` contains no query term: its BM25 score is 0);
    - `term_idf`: the collection's IDF of each query term, as Qdrant's IDF modifier computes it,
      ln(1 + (N - n + 0.5) / (n + 0.5)) (a term in no chunk: n = 0), unaffected by filters;
    - `vectors`: the dense vectors of the best `vectors_of` chunks of each list (for pseudo-relevance feedback).
    """

    dense: list[Hit]
    sparse: list[Hit]
    dense_scores: dict[str, float]
    sparse_scores: dict[str, float]
    term_idf: dict[int, float]
    vectors: Mapping[str, Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchDefaults:
    """A collection's own search defaults, persisted with it (None: the search service's default)."""

    fusion: Fusion | None = None
    rrf_k: int | None = None


@dataclass(frozen=True)
class CollectionStats:
    name: str
    documents: int
    chunks: int


class StoreError(Exception):
    """A storage failure (the store itself, not the caller's input)."""


class StoreBusyError(StoreError):
    """The embedded store's data directory is owned by another process."""


class StoreFormatError(StoreError):
    """The embedded store's data directory was written in a format this version cannot read."""


class CollectionNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} does not exist")
        self.name = name


class Store(Protocol):
    dimension: int
    # True when a call is work in this process that holds the GIL for most of it (the embedded store): a worker
    # thread gains an async caller nothing, so `aio.store_call(..., inline=True)` runs it on the caller's thread.
    # False when calls wait on the network (a Qdrant server): those go to a thread.
    holds_gil: bool

    def ensure_collection(self, name: str) -> bool:
        """Create the collection if missing; True if it was created now."""

    def collection_exists(self, name: str) -> bool: ...

    def list_collections(self) -> list[str]:
        """Names, sorted."""

    def delete_collection(self, name: str) -> int:
        """Delete it; return how many chunks it had. CollectionNotFound if missing."""

    def upsert(self, name: str, points: Sequence[ChunkPoint]) -> None:
        """Insert or replace points (by id). CollectionNotFound if missing."""

    def delete_points(self, name: str, ids: Sequence[str]) -> None: ...

    def clear_points(self, name: str) -> int:
        """Delete every point of the collection, keeping the collection, its records and search defaults; return
        how many there were. CollectionNotFound if missing."""

    def delete_document(self, name: str, doc_id: str) -> int:
        """Delete every chunk of the document; return how many. CollectionNotFound if missing."""

    def document_chunks(self, name: str, doc_id: str) -> list[Hit]:
        """Every chunk of the document ordered by chunk_index (score 0). Empty if unknown."""

    def document_chunk_ids(self, name: str, doc_id: str) -> list[str]:
        """The point ids of the document's chunks (no payloads)."""

    def document_hash(self, name: str, doc_id: str) -> str | None:
        """The stored content_hash of the document, or None if it is not stored."""

    def list_documents(
        self, name: str, filters: Mapping[str, FilterValue], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        """One payload per document whose chunks match `filters` (as in `Query.filters`): the `fields` (and
        `doc_id`) of its first chunk, ordered by doc_id. CollectionNotFound if missing."""

    def query(self, name: str, query: Query) -> list[Hit]:
        """Best first; equal scores ordered by (doc_id, chunk_index) so results are stable."""

    def hybrid_evidence(
        self, name: str, query: Query, vectors_of: int = 0, same_sparse_as: HybridEvidence | None = None
    ) -> HybridEvidence:
        """The candidates of a hybrid `query` with both scores each and the query terms' IDF (see
        `HybridEvidence`), in two batched calls to the engine (the lists, then the scores they lack, by id).
        `same_sparse_as`: an earlier call's evidence for the same query but for its dense vector (pseudo-relevance
        feedback moves only that): its sparse list, BM25 scores and IDFs are this query's too, so only the dense
        list is searched again; the result is what a call without it would give. CollectionNotFound if missing."""

    def payloads(self, name: str, ids: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """The payloads of the given point ids (a lookup by id, no search); unknown ids are left out."""

    def stats(self, name: str) -> CollectionStats: ...

    def search_defaults(self, name: str) -> SearchDefaults:
        """The collection's search defaults (all None if never set). CollectionNotFound if missing."""

    def set_search_defaults(self, name: str, defaults: SearchDefaults) -> None:
        """Replace the collection's search defaults. CollectionNotFound if missing."""

    def collection_record(self, name: str, key: str) -> Any | None:
        """The JSON value kept with the collection under `key` (see `set_collection_record`), None if there is
        none. CollectionNotFound if missing."""

    def set_collection_record(self, name: str, key: str, value: Any | None) -> None:
        """Keep a JSON value (object, list, ...) with the collection under `key` (RECORD_KEY_RE), replacing the
        one there; None removes it. Records survive restarts, go with the collection (deleting it deletes them)
        and are meant for small things about it (a golden set, an evaluation history: a few MiB at most).
        CollectionNotFound if missing; ValueError for a key that breaks the rule."""

    def close(self) -> None: ...
