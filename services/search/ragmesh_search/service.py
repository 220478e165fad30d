"""The query path: validate -> resolve each collection to the version that answers (once per request) -> embed
the query once per model -> query each collection in parallel -> merge, group, threshold. Also whole-document
fetch and collection listing. No gRPC server code here.

A collection name points at one physical version (`ragmesh_store.versions`); a request reads each collection's
versions record once and makes every store call of that collection on the one physical collection it found, so
a response comes from exactly one version even when the name switches while it is being answered."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_common.vectors import dense_rows
from ragmesh_store import (
    METADATA_PREFIX,
    CollectionNotFound,
    CollectionStats,
    Hit,
    Query,
    SearchDefaults,
    Sparse,
    Store,
    tie_key,
)
from ragmesh_store.aio import store_call
from ragmesh_store.base import FilterValue, Fusion, Mode
from ragmesh_store.documents import reassemble
from ragmesh_store.versions import Version, Versions, read_versions

from .cache import QueryCache
from .config import SearchSettings
from .fusion import Plan, SearchMode, adaptive_fusion, plan, rocchio
from .rerank import Reranker

log = logging.getLogger(__name__)

MAX_TOP_K = 100
MAX_RRF_K = 10_000
DEFAULT_TOP_K = 5
# Chunk fields filters may name directly; any other key is a user metadata key.
CHUNK_FILTER_FIELDS = validation.CHUNK_FILTER_FIELDS
# group_by_document over-fetches chunks to find top_k distinct documents, growing up to this many.
_MAX_GROUP_FETCH = 2000
_GROUP_FETCH_FACTOR = 4
# Adaptive fusion with pseudo-relevance feedback reads the dense vectors of this many top chunks of each list (the
# feedback chunks are the top fused ones, almost always among them).
_PRF_VECTORS = 10
# Adaptive fusion ranks this many chunks past the limit, so that chunks tied with the last one kept can be ordered
# by doc_id once their payloads are read.
_TIE_ROOM = 10
_KINDS: dict[Mode, list[embedder_pb.VectorKind]] = {
    "dense": [embedder_pb.VECTOR_KIND_DENSE],
    "sparse": [embedder_pb.VECTOR_KIND_SPARSE],
    "hybrid": [embedder_pb.VECTOR_KIND_DENSE, embedder_pb.VECTOR_KIND_SPARSE],
}


@dataclass(frozen=True)
class SearchIn:
    query: str
    collections: Sequence[str] = ()
    top_k: int = 0
    mode: SearchMode | None = None
    filters: Mapping[str, Any] = field(default_factory=dict)
    group_by_document: bool = False
    score_threshold: float | None = None
    fusion: Fusion | None = None
    rrf_k: int | None = None
    # collection -> the version to search instead of the active one (evaluating a version being built).
    versions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """One collection of a request, resolved once: the version that answers it and where that version lives."""

    name: str  # the collection's name (results carry it)
    version: int
    physical: str  # the store collection of that version
    model: str  # the embedder's name for the version's model ("" = its default)
    defaults: SearchDefaults


@dataclass(frozen=True)
class Searched:
    """A search's results, best first, and how it was answered."""

    plan: Plan  # the plan (mode, fusion) used for the first collection
    found: list[Found]
    versions: dict[str, int]  # collection -> the version that answered
    model_ids: dict[str, str]  # collection -> the id of the model its query was embedded with


@dataclass(frozen=True)
class VersionOut:
    """One version of a collection and the counts of its own physical collection."""

    version: Version
    documents: int
    chunks: int


@dataclass(frozen=True)
class CollectionOut:
    """A collection: its active version's counts, and every version it keeps."""

    name: str
    documents: int
    chunks: int
    version: int
    versions: list[VersionOut]


@dataclass(frozen=True)
class Found:
    """One result: a chunk and the collection it came from."""

    collection: str
    hit: Hit


@dataclass(frozen=True)
class DocumentOut:
    doc_id: str
    collection: str
    text: str
    chunks: list[Hit]

    @property
    def payload(self) -> Mapping[str, Any]:
        """The document-level fields (title, source, metadata, ...) as the first chunk carries them."""
        return self.chunks[0].payload


def parse_filters(raw: Mapping[str, Any]) -> dict[str, FilterValue]:
    """Request filters -> store filters (`metadata.<key>` for user keys), or FILTER_INVALID."""
    out: dict[str, FilterValue] = {}
    for key, value in raw.items():
        if key in CHUNK_FILTER_FIELDS:
            path = key
        elif validation.METADATA_KEY_RE.fullmatch(key):
            path = f"{METADATA_PREFIX}{key}"
        else:
            raise _bad_filter(
                key,
                f"filter key {key[:70]!r} is neither a chunk field "
                f"({', '.join(CHUNK_FILTER_FIELDS)}) nor a valid metadata key",
            )
        if isinstance(value, list):
            if not value:
                raise _bad_filter(key, f"filter {key!r} has an empty list of values")
            out[path] = [_scalar(key, v, path) for v in value]
        else:
            out[path] = _scalar(key, value, path)
    return out


def _scalar(key: str, value: Any, path: str) -> str | int | float | bool:
    if isinstance(value, float):
        value = validation.whole_number(value)  # Struct carries every number as a double
    if value is None or isinstance(value, (dict, list)):
        raise _bad_filter(key, f"filter {key!r} must be a string, number or boolean, or a list of them")
    if path in CHUNK_FILTER_FIELDS and not isinstance(value, str):
        raise _bad_filter(key, f"filter {key!r} must be a string")
    return value


def _bad_filter(key: str, message: str) -> RagmeshError:
    return invalid_argument(Reason.FILTER_INVALID, message, field=f"filters.{key[:70]}", key=key[:70])


class Searcher:
    """Search, whole-document fetch and collection listing over the store. Create once per process."""

    def __init__(
        self,
        store: Store,
        embedder: ServiceClient,
        *,
        default_mode: SearchMode,
        prefetch_limit: int,
        rrf_k: int,
        max_query_chars: int,
        default_fusion: Fusion = "relative_score",
        dense_weight: float = 0.75,
        reranker: Reranker | None = None,
        rerank_top_n: int = 50,
        prf_docs: int = 3,
        prf_weight: float = 0.2,
        query_cache: QueryCache | None = None,
    ) -> None:
        self.dense_weight = dense_weight
        self.prf_docs = prf_docs
        self.prf_weight = prf_weight
        self.store = store
        # The embedded store's calls hold the GIL: on the event loop's thread they skip a hand-off and the GIL waits
        # of a worker thread (hybrid at 16 clients: ~120 -> ~200 q/s); a Qdrant server's go to a thread.
        self._inline = bool(getattr(store, "holds_gil", False))
        self.reranker = reranker
        self.rerank_top_n = rerank_top_n
        self.embedder = embedder
        self.default_mode: SearchMode = default_mode
        self.default_fusion: Fusion = default_fusion
        self.prefetch_limit = prefetch_limit
        self.rrf_k = rrf_k
        self.max_query_chars = max_query_chars
        self.query_cache = query_cache if query_cache is not None else QueryCache(0)
        # collection -> the model its active version used at its last search (what the next query is embedded
        # with while its versions are read)
        self._models_seen: dict[str, str] = {}

    @classmethod
    def from_settings(
        cls,
        settings: SearchSettings,
        store: Store,
        embedder: ServiceClient,
        *,
        reranker: Reranker | None = None,
        query_cache: QueryCache | None = None,
    ) -> Searcher:
        """The searcher the search service runs with these settings (the benchmarks build the same one)."""
        return cls(
            store,
            embedder,
            default_mode=settings.default_mode,
            prefetch_limit=settings.prefetch_limit,
            rrf_k=settings.rrf_k,
            max_query_chars=settings.max_query_chars,
            default_fusion=settings.default_fusion,
            dense_weight=settings.dense_weight,
            reranker=reranker,
            rerank_top_n=settings.rerank_top_n,
            prf_docs=settings.prf_docs,
            prf_weight=settings.prf_weight,
            query_cache=query_cache,
        )

    async def search(self, request: SearchIn) -> Searched:
        """The best chunks for a query across the requested collections, best first (scores 0..1, see
        `fusion`), each collection answered by one version (its active one, or the one `request.versions` pins).
        Fusion and rrf_k come from the request, else the collection's search defaults, else the service's."""
        if not request.query.strip():
            raise invalid_argument(Reason.QUERY_EMPTY, "the query is empty", field="query")
        if len(request.query) > self.max_query_chars:
            raise invalid_argument(
                Reason.QUERY_TOO_LONG,
                f"the query has {len(request.query)} characters; the limit is {self.max_query_chars}",
                field="query",
                limit=self.max_query_chars,
            )
        top_k = request.top_k or DEFAULT_TOP_K
        if not 1 <= top_k <= MAX_TOP_K:
            raise invalid_argument(
                Reason.TOP_K_OUT_OF_RANGE,
                f"top_k must be between 1 and {MAX_TOP_K}",
                field="top_k",
                top_k=request.top_k,
            )
        names = list(
            dict.fromkeys(validation.collection_name(c, field="collections") for c in request.collections or [""])
        )
        if request.rrf_k is not None and not 1 <= request.rrf_k <= MAX_RRF_K:
            raise invalid_argument(
                Reason.RRF_K_OUT_OF_RANGE,
                f"rrf_k must be between 1 and {MAX_RRF_K}",
                field="rrf_k",
                rrf_k=request.rrf_k,
            )
        filters = parse_filters(request.filters)
        mode = request.mode or self.default_mode
        store_mode = plan(mode, request.fusion, self.rrf_k, self.default_fusion).store_mode
        targets, vectors = await self._resolve_and_embed(request.query, store_mode, names, request.versions)
        plans = [
            plan(
                mode,
                request.fusion or t.defaults.fusion,
                request.rrf_k or t.defaults.rrf_k or self.rrf_k,
                self.default_fusion,
                self.dense_weight,
            )
            for t in targets
        ]

        # With a reranker, the best `rerank_top_n` candidates are re-ordered by it, then cut to top_k.
        want = max(top_k, self.rerank_top_n) if self.reranker else top_k
        threshold = None if self.reranker else request.score_threshold
        limit = min(want * _GROUP_FETCH_FACTOR, _MAX_GROUP_FETCH) if request.group_by_document else want
        while True:
            queries = [
                Query(
                    mode=p.store_mode,
                    limit=limit,
                    dense=vectors[t.model][0],
                    sparse=vectors[t.model][1],
                    filters=filters,
                    prefetch_limit=self.prefetch_limit,
                    rrf_k=p.rrf_k,
                    fusion=p.fusion or "rrf",
                    rrf_weights=p.weights,
                    dense_weight=p.dense_weight,
                )
                for t, p in zip(targets, plans, strict=True)
            ]
            per_collection = await asyncio.gather(
                *(self._query(t.physical, p, q) for t, p, q in zip(targets, plans, queries, strict=True))
            )
            normalised = [p.normalise(hits) for p, hits in zip(plans, per_collection, strict=True)]
            found = _merge(names, normalised, threshold)
            if request.group_by_document:
                found = _best_per_document(found)
            exhausted = all(len(hits) < limit for hits in per_collection)
            if len(found) >= want or exhausted or limit >= _MAX_GROUP_FETCH:
                if self.reranker:
                    found = await _reranked(self.reranker, request.query, found[:want], request.score_threshold)
                return Searched(
                    plans[0],
                    found[:top_k],
                    {t.name: t.version for t in targets},
                    {t.name: vectors[t.model][2] for t in targets},
                )
            limit = min(limit * _GROUP_FETCH_FACTOR, _MAX_GROUP_FETCH)

    async def _resolve_and_embed(
        self,
        text: str,
        mode: Mode,
        names: Sequence[str],
        pinned: Mapping[str, int],
    ) -> tuple[list[Target], dict[str, tuple[list[float] | None, Sparse | None, str]]]:
        """Each collection's version (one store call) and the query's vectors for each model they use.

        The query is embedded while the versions are read, with the model each collection used last time (almost
        always the one it uses now); only a collection whose version's model changed since waits for a second
        Embed call. A missing collection is reported before an embedder failure."""
        guessed = {self._models_seen.get(n, "") for n in names}
        embeds = {m: asyncio.ensure_future(self._embed_query(text, mode, m)) for m in guessed}
        try:
            targets = await store_call(self._targets, names, pinned, inline=self._inline)
        except BaseException:
            for task in embeds.values():
                _discard(task)
            raise
        for t in targets:
            if t.name not in pinned:
                self._models_seen[t.name] = t.model
        needed = list(dict.fromkeys(t.model for t in targets))
        for model in needed:
            if model not in embeds:
                embeds[model] = asyncio.ensure_future(self._embed_query(text, mode, model))
        for model, task in embeds.items():
            if model not in needed:
                _discard(task)
        outcomes = await asyncio.gather(*(embeds[m] for m in needed), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return targets, dict(zip(needed, outcomes, strict=True))  # type: ignore[arg-type]

    def _targets(self, names: Sequence[str], pinned: Mapping[str, int]) -> list[Target]:
        """Each collection resolved to its active version (or the one `pinned`), with its search defaults
        (blocking). CollectionNotFound for a missing collection, VERSION_NOT_FOUND for a pinned version it does
        not have."""
        targets = []
        for name in names:
            versions = read_versions(self.store, name)
            number = pinned.get(name, versions.active)
            version = versions.get(number)
            if version is None:
                raise version_not_found(versions, number)
            targets.append(
                Target(
                    name,
                    number,
                    versions.physical(number),
                    version.settings.model if version.settings else "",
                    self.store.search_defaults(name),
                )
            )
        return targets

    async def _query(self, name: str, used: Plan, query: Query) -> list[Hit]:
        """One collection's hits, best first: the store's own query, or for adaptive fusion `_adaptive` (its
        store calls and the fusion between them in one trip off the event loop)."""
        if used.fusion != "adaptive" or used.store_mode != "hybrid" or query.sparse is None:
            return await store_call(self.store.query, name, query, inline=self._inline)
        return await store_call(self._adaptive, name, query, query.sparse, inline=self._inline)

    def _adaptive(self, name: str, query: Query, sparse: Sparse) -> list[Hit]:
        """Adaptive fusion (blocking): the store's hybrid evidence fused here (see `fusion`), with pseudo-relevance
        feedback: a second store query with the dense query moved towards the top fused chunks (no second model
        call; the sparse list, its BM25 scores and its terms' IDFs are the first query's, so only the dense list is
        searched again); then the payloads of the hits kept, by id."""
        evidence = self.store.hybrid_evidence(name, query, _PRF_VECTORS if self.prf_docs else 0)
        hits, _ = adaptive_fusion(evidence, sparse, max(query.limit + _TIE_ROOM, self.prf_docs))
        feedback = [evidence.vectors[h.id] for h in hits[: self.prf_docs] if h.id in evidence.vectors]
        if feedback and query.dense is not None:
            query = dataclasses.replace(query, dense=rocchio(query.dense, feedback, beta=self.prf_weight))
            evidence = self.store.hybrid_evidence(name, query, 0, same_sparse_as=evidence)
            hits, _ = adaptive_fusion(evidence, sparse, query.limit + _TIE_ROOM)
        # The hits kept, and any that tie with the last of them (their order is by doc_id, chunk_index).
        last = hits[query.limit - 1].score if len(hits) >= query.limit else None
        kept = [h for i, h in enumerate(hits) if i < query.limit or h.score == last]
        payloads = self.store.payloads(name, [h.id for h in kept])
        return sorted((Hit(h.id, h.score, payloads[h.id]) for h in kept if h.id in payloads), key=tie_key)[
            : query.limit
        ]

    async def _embed_query(
        self, text: str, mode: Mode, model: str = ""
    ) -> tuple[list[float] | None, Sparse | None, str]:
        """The query's vectors for `mode` by embedder model `model` ("" = its default) and the id of that model:
        one Embed call for dense and sparse together, or the cache."""
        kinds = _KINDS[mode]
        key = (text, tuple(kinds), model)
        if (cached := self.query_cache.get(key)) is not None:
            return cached  # type: ignore[return-value]
        request = embedder_pb.EmbedRequest(
            texts=[text],
            input_type=embedder_pb.INPUT_TYPE_QUERY,
            kinds=kinds,
            dense_format=embedder_pb.DENSE_FORMAT_PACKED_FLOAT32,
            model=model,
        )
        response = await self.embedder.call("Embed", request)
        embedding = response.embeddings[0]
        dense = dense_rows(response)[0] if mode != "sparse" else None
        sparse = Sparse(list(embedding.sparse.indices), list(embedding.sparse.values)) if mode != "dense" else None
        self.query_cache.put(key, (dense, sparse, response.model_id), response.model_id)
        return dense, sparse, response.model_id

    async def get_document(self, collection: str, doc_id: str) -> DocumentOut:
        """A whole document (from the collection's active version): its chunks in order and their text joined
        without repeating overlaps."""
        collection = validation.collection_name(collection)
        if not doc_id:
            raise invalid_argument(Reason.DOCUMENT_ID_INVALID, "doc_id is required", field="doc_id")
        validation.doc_id(doc_id)
        chunks = await store_call(self._document_chunks, collection, doc_id, inline=self._inline)
        if not chunks:
            raise not_found(
                Reason.DOCUMENT_NOT_FOUND,
                f"document {doc_id!r} is not in collection {collection!r}",
                collection=collection,
                doc_id=doc_id,
            )
        # While a changed document is being replaced, old chunks may linger for a moment: keep one version.
        current = chunks[0].payload.get("content_hash")
        chunks = [c for c in chunks if c.payload.get("content_hash") == current]
        return DocumentOut(doc_id, collection, reassemble(chunks), chunks)

    def _document_chunks(self, collection: str, doc_id: str) -> list[Hit]:
        return self.store.document_chunks(read_versions(self.store, collection).physical(), doc_id)

    async def list_collections(self) -> list[CollectionOut]:
        """Every collection with its versions and their document and chunk counts, by name."""
        names = await store_call(self.store.list_collections, inline=self._inline)
        listed = await asyncio.gather(
            *(store_call(self._collection, n, inline=self._inline) for n in names), return_exceptions=True
        )
        # A collection deleted between listing and counting is simply not listed.
        for outcome in listed:
            if isinstance(outcome, BaseException) and getattr(outcome, "reason", "") != "COLLECTION_NOT_FOUND":
                raise outcome
        return sorted((c for c in listed if isinstance(c, CollectionOut)), key=lambda c: c.name)

    def _collection(self, name: str) -> CollectionOut:
        """One collection's versions and counts (blocking). CollectionNotFound if it is gone."""
        versions = read_versions(self.store, name)
        out = []
        for version in versions.versions:
            try:
                stats = self.store.stats(versions.physical(version.version))
            except CollectionNotFound:
                if version.version == versions.active:
                    raise
                stats = CollectionStats(versions.physical(version.version), 0, 0)  # being created, or dropped
            out.append(VersionOut(version, stats.documents, stats.chunks))
        active = next(v for v in out if v.version.version == versions.active)
        return CollectionOut(name, active.documents, active.chunks, versions.active, out)


def version_not_found(versions: Versions, version: int) -> RagmeshError:
    """NOT_FOUND VERSION_NOT_FOUND: the collection has no such version."""
    kept = ", ".join(str(v.version) for v in versions.versions)
    return not_found(
        Reason.VERSION_NOT_FOUND,
        f"collection {versions.name!r} has no version {version} (it keeps {kept}; {versions.active} is active)",
        collection=versions.name,
        version=version,
    )


def _discard(task: asyncio.Future[Any]) -> None:
    """Cancel a task whose result is not wanted, and retrieve its outcome so a failure is not reported."""
    task.cancel()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _merge(names: Sequence[str], per_collection: Sequence[Sequence[Hit]], threshold: float | None) -> list[Found]:
    """All collections' hits best first; equal scores in a stable order (collection, doc_id, chunk_index)."""
    found = [
        Found(n, h)
        for n, hits in zip(names, per_collection, strict=True)
        for h in hits
        if threshold is None or h.score >= threshold
    ]
    return sorted(
        found,
        key=lambda f: (
            -f.hit.score,
            f.collection,
            str(f.hit.payload.get("doc_id", "")),
            int(f.hit.payload.get("chunk_index", 0)),
        ),
    )


async def _reranked(reranker: Reranker, query: str, found: Sequence[Found], threshold: float | None) -> list[Found]:
    """The candidates re-scored by the reranker (title and chunk text), best first, ties in fused order."""
    scores = await reranker.rerank(query, [_rerank_text(f.hit.payload) for f in found])
    ranked = sorted(zip(scores, range(len(found)), found, strict=True), key=lambda t: (-t[0], t[1]))
    return [
        Found(f.collection, Hit(f.hit.id, s, f.hit.payload))
        for s, _, f in ranked
        if threshold is None or s >= threshold
    ]


def _rerank_text(payload: Mapping[str, Any]) -> str:
    title, text = str(payload.get("title") or ""), str(payload.get("text") or "")
    return f"{title}\n\n{text}" if title else text


def _best_per_document(found: Sequence[Found]) -> list[Found]:
    seen: set[tuple[str, str]] = set()
    out = []
    for f in found:
        key = (f.collection, str(f.hit.payload.get("doc_id", "")))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out
