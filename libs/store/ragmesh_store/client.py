"""`QdrantClientStore`: the `Store` on qdrant-client, for a Qdrant server or a distributed cluster (QDRANT_URL).

Collections are named `<prefix><name>` so several deployments can share a cluster; `list_collections` only
shows (and strips) this deployment's prefix. qdrant-client's local mode (`QdrantClient(":memory:")`) works too
(the contract tests use it); it is not thread-safe, so calls to a local client are serialised here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import UnexpectedResponse
from qdrant_client.local.qdrant_local import QdrantLocal

from ._common import (
    FIXED_INDEXES,
    Condition,
    DocumentReads,
    EvidenceReads,
    IndexKind,
    checked_name,
    checked_record_key,
    conditions,
    defaults_from,
    document_row,
    engine_id,
    engine_ids,
    evidence_depth,
    first_chunk_conditions,
    metadata_indexes,
    relative_score_query,
    stable_query,
)
from .base import (
    DENSE,
    SPARSE,
    ChunkPoint,
    CollectionNotFound,
    CollectionStats,
    FilterValue,
    Hit,
    HybridEvidence,
    Query,
    SearchDefaults,
    StoreError,
)
from .config import StoreSettings
from .versions import is_version_name

_SCROLL_PAGE = 1024
_DEFAULTS_KEY = "ragmesh_search_defaults"  # the collection metadata key holding its SearchDefaults
_RECORD_KEY = "ragmesh_record_{key}"  # the collection metadata key holding a collection record
_SCHEMAS: dict[IndexKind, models.PayloadSchemaType] = {
    "keyword": models.PayloadSchemaType.KEYWORD,
    "integer": models.PayloadSchemaType.INTEGER,
    "float": models.PayloadSchemaType.FLOAT,
    "bool": models.PayloadSchemaType.BOOL,
}


class QdrantClientStore(DocumentReads):
    """The `Store` over a `QdrantClient` (server, cluster or local mode); it owns the client and closes it."""

    holds_gil = False  # calls wait on the server: a thread keeps the caller's event loop serving

    def __init__(
        self,
        client: QdrantClient,
        dimension: int,
        prefix: str = "",
        *,
        hnsw_ef: int | None = None,
        replication_factor: int | None = None,
        shard_number: int | None = None,
    ) -> None:
        self.dimension = dimension
        self.client = client
        self.prefix = prefix
        self._hnsw_ef = hnsw_ef
        self._replication_factor = replication_factor
        self._shard_number = shard_number
        local = isinstance(getattr(client, "_client", None), QdrantLocal)
        # Local mode has no locking of its own; a server client is safe to share between threads.
        self._call_lock: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if local else contextlib.nullcontext()
        )
        self._indexed: dict[str, set[str]] = {}  # collection -> payload fields known to be indexed
        self._index_lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        dimension: int,
        *,
        api_key: str | None = None,
        timeout_seconds: float = 10.0,
        prefix: str = "",
        hnsw_ef: int | None = None,
        replication_factor: int | None = None,
        shard_number: int | None = None,
    ) -> QdrantClientStore:
        client = QdrantClient(url=url, api_key=api_key, timeout=max(1, round(timeout_seconds)))
        return cls(
            client,
            dimension,
            prefix,
            hnsw_ef=hnsw_ef,
            replication_factor=replication_factor,
            shard_number=shard_number,
        )

    @classmethod
    def from_settings(cls, settings: StoreSettings, dimension: int) -> QdrantClientStore:
        if not settings.qdrant_url:
            raise ValueError("QDRANT_URL is not set")
        return cls.from_url(
            settings.qdrant_url,
            dimension,
            api_key=settings.qdrant_api_key.get_secret_value() if settings.qdrant_api_key else None,
            timeout_seconds=settings.qdrant_timeout_seconds,
            prefix=settings.collection_prefix,
            hnsw_ef=settings.hnsw_ef,
            replication_factor=settings.replication_factor,
            shard_number=settings.shard_number,
        )

    # --- plumbing ----------------------------------------------------------------------------------------
    def _full(self, name: str) -> str:
        return f"{self.prefix}{checked_name(name)}"

    @contextlib.contextmanager
    def _call(self, name: str | None = None) -> Iterator[None]:
        """Serialise local-mode calls and turn client errors into CollectionNotFound / StoreError."""
        if name is not None:
            checked_name(name)
        try:
            with self._call_lock:
                yield
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - qdrant-client raises ValueError, HTTP and gRPC errors
            if name is not None and _is_not_found(exc, self._full(name)):
                raise CollectionNotFound(name) from exc
            raise StoreError(f"qdrant: {exc}") from exc

    # --- collections -------------------------------------------------------------------------------------
    def ensure_collection(self, name: str) -> bool:
        full = self._full(name)
        with self._call(name):
            if self.client.collection_exists(full):
                return False
            try:
                self.client.create_collection(
                    full,
                    vectors_config={DENSE: models.VectorParams(size=self.dimension, distance=models.Distance.COSINE)},
                    sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
                    replication_factor=self._replication_factor,
                    shard_number=self._shard_number,
                )
            except (UnexpectedResponse, grpc.RpcError, ValueError):
                if self.client.collection_exists(full):
                    return False  # another replica created it at the same moment
                raise
            for field, kind in FIXED_INDEXES.items():
                self.client.create_payload_index(full, field, field_schema=_SCHEMAS[kind], wait=True)
        with self._index_lock:
            self._indexed[name] = set(FIXED_INDEXES)
        return True

    def collection_exists(self, name: str) -> bool:
        with self._call(name):
            return self.client.collection_exists(self._full(name))

    def list_collections(self) -> list[str]:
        with self._call():
            names = [c.name for c in self.client.get_collections().collections]
        # Only collections' own names: the versions above 1 (`<name>.v<n>`) are not listed.
        return sorted(
            n[len(self.prefix) :]
            for n in names
            if n.startswith(self.prefix) and len(n) > len(self.prefix) and not is_version_name(n[len(self.prefix) :])
        )

    def delete_collection(self, name: str) -> int:
        with self._call(name):
            chunks = self.client.count(self._full(name), exact=True).count
            self.client.delete_collection(self._full(name))
        with self._index_lock:
            self._indexed.pop(name, None)
        return chunks

    # --- writes --------------------------------------------------------------------------------------------
    def upsert(self, name: str, points: Sequence[ChunkPoint]) -> None:
        if not points:
            self._require(name)
            return
        structs = [
            models.PointStruct(
                id=engine_id(p.id),
                vector={
                    DENSE: list(p.dense),
                    SPARSE: models.SparseVector(indices=list(p.sparse.indices), values=list(p.sparse.values)),
                },
                payload=dict(p.payload),
            )
            for p in points
        ]
        self._index_metadata(name, points)
        with self._call(name):
            self.client.upsert(self._full(name), points=structs, wait=True)

    def _index_metadata(self, name: str, points: Sequence[ChunkPoint]) -> None:
        """Create a payload index for each metadata key seen for the first time (filters need one)."""
        with self._index_lock:
            known = self._indexed.get(name)
            if known is None:
                with self._call(name):
                    info = self.client.get_collection(self._full(name))
                known = self._indexed[name] = set(info.payload_schema or {})
            for path, kind in metadata_indexes(points).items():
                if path not in known:
                    with self._call(name):
                        self.client.create_payload_index(self._full(name), path, field_schema=_SCHEMAS[kind], wait=True)
                    known.add(path)

    def delete_points(self, name: str, ids: Sequence[str]) -> None:
        if not ids:
            self._require(name)
            return
        with self._call(name):
            self.client.delete(self._full(name), points_selector=models.PointIdsList(points=engine_ids(ids)), wait=True)

    def clear_points(self, name: str) -> int:
        with self._call(name):
            chunks = self.client.count(self._full(name), exact=True).count
            # An empty filter matches every point.
            self.client.delete(
                self._full(name), points_selector=models.FilterSelector(filter=models.Filter()), wait=True
            )
        return chunks

    def delete_document(self, name: str, doc_id: str) -> int:
        ids = self.document_chunk_ids(name, doc_id)
        self.delete_points(name, ids)
        return len(ids)

    def _require(self, name: str) -> None:
        if not self.collection_exists(name):
            raise CollectionNotFound(name)

    # --- reads ---------------------------------------------------------------------------------------------
    def _scroll(self, name: str, doc_id: str, with_payload: Any, limit: int | None = None) -> list[models.Record]:
        doc_filter = models.Filter(must=[models.FieldCondition(key="doc_id", match=models.MatchValue(value=doc_id))])
        records: list[models.Record] = []
        offset = None
        while True:
            with self._call(name):
                batch, offset = self.client.scroll(
                    self._full(name),
                    scroll_filter=doc_filter,
                    limit=limit or _SCROLL_PAGE,
                    offset=offset,
                    with_payload=with_payload,
                    with_vectors=False,
                )
            records.extend(batch)
            if offset is None or limit is not None:
                return records

    def list_documents(
        self, name: str, filters: Mapping[str, FilterValue], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        query_filter = _client_filter(first_chunk_conditions(filters))
        rows: list[dict[str, Any]] = []
        offset = None
        while True:
            with self._call(name):
                batch, offset = self.client.scroll(
                    self._full(name),
                    scroll_filter=query_filter,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=["doc_id", *fields],
                    with_vectors=False,
                )
            rows.extend(document_row(r.payload, fields) for r in batch)
            if offset is None:
                return sorted(rows, key=lambda row: str(row["doc_id"]))

    def query(self, name: str, query: Query) -> list[Hit]:
        if query.mode == "hybrid" and query.fusion == "relative_score":
            return relative_score_query(functools.partial(self.query, name), query)
        query_filter = _client_filter(conditions(query.filters))
        params = models.SearchParams(hnsw_ef=self._hnsw_ef) if self._hnsw_ef else None
        if query.mode == "hybrid":
            prefetch_limit = max(query.prefetch_limit, query.limit)
            prefetch: list[models.Prefetch] | None = [
                models.Prefetch(
                    query=_vector(query, "dense"), using=DENSE, limit=prefetch_limit, filter=query_filter, params=params
                ),
                models.Prefetch(
                    query=_vector(query, "sparse"), using=SPARSE, limit=prefetch_limit, filter=query_filter
                ),
            ]
            weights = list(query.rrf_weights) if query.rrf_weights else None
            scoring: Any = (
                models.FusionQuery(fusion=models.Fusion.DBSF)
                if query.fusion == "dbsf"
                else models.RrfQuery(rrf=models.Rrf(k=query.rrf_k, weights=weights))
            )
            using = None
        else:
            prefetch, scoring = None, _vector(query, query.mode)
            using = DENSE if query.mode == "dense" else SPARSE

        def run(limit: int) -> list[Hit]:
            with self._call(name):
                response = self.client.query_points(
                    self._full(name),
                    query=scoring,
                    using=using,
                    prefetch=prefetch,
                    query_filter=query_filter,
                    limit=limit,
                    score_threshold=query.score_threshold,
                    search_params=params if query.mode == "dense" else None,
                    with_payload=True,
                )
            return [Hit(str(p.id), p.score, p.payload or {}) for p in response.points]

        return stable_query(run, query.limit)

    def hybrid_evidence(
        self, name: str, query: Query, vectors_of: int = 0, same_sparse_as: HybridEvidence | None = None
    ) -> HybridEvidence:
        query_filter = _client_filter(conditions(query.filters))
        params = models.SearchParams(hnsw_ef=self._hnsw_ef) if self._hnsw_ef else None
        depth = evidence_depth(query)
        dense, sparse = _vector(query, "dense"), _vector(query, "sparse")
        terms = list(query.sparse.indices) if query.sparse and same_sparse_as is None else []

        def nearest(vector: Any, using: str, limit: int, **options: Any) -> models.QueryRequest:
            return models.QueryRequest(
                query=vector,
                using=using,
                filter=query_filter,
                limit=limit,
                params=params if using == DENSE else None,
                **options,
            )

        def by_id(vector: Any, using: str, ids: set[str]) -> models.QueryRequest:
            # An exact score of a few points (re-running the other list's search as a prefetch costs several times
            # more); a chunk without any query term is left out of a BM25 one, as search leaves it out.
            return models.QueryRequest(
                query=vector,
                using=using,
                limit=len(ids),
                with_payload=False,
                filter=models.Filter(must=[models.HasIdCondition(has_id=engine_ids(ids))]),
                params=models.SearchParams(exact=True) if using == DENSE else None,
            )

        requests = [nearest(dense, DENSE, depth, with_payload=False)]
        if same_sparse_as is None:  # else its sparse list, BM25 scores and IDFs are this query's too
            requests.append(nearest(sparse, SPARSE, depth, with_payload=False))
            # One single-term BM25 query per query term, unfiltered: its best chunk's score / the term's weight in
            # that chunk is the term's IDF.
            requests += [
                models.QueryRequest(
                    query=models.SparseVector(indices=[t], values=[1.0]),
                    using=SPARSE,
                    limit=1,
                    with_payload=False,
                    with_vector=[SPARSE],
                )
                for t in terms
            ]
        with self._call(name):
            lists = [r.points for r in self.client.query_batch_points(self._full(name), requests=requests)]
            reads = EvidenceReads(query, lists[0], lists[1] if same_sparse_as is None else [], same_sparse_as)
            # The candidates that lack one of their two scores, scored by id.
            rescoring = {
                kind: by_id(vector, using, ids)
                for kind, vector, using, ids in (
                    ("cosine", dense, DENSE, reads.need_cosine),
                    ("bm25", sparse, SPARSE, reads.need_bm25),
                )
                if ids
            }
            rescored = dict(
                zip(
                    rescoring,
                    [
                        r.points
                        for r in self.client.query_batch_points(self._full(name), requests=list(rescoring.values()))
                    ]
                    if rescoring
                    else [],
                    strict=True,
                )
            )
            # The feedback vectors, read by id (two more searches returning vectors cost several times more).
            top = reads.vector_ids(vectors_of)
            vectors = (
                [self.client.retrieve(self._full(name), ids=engine_ids(top), with_payload=False, with_vectors=[DENSE])]
                if top
                else []
            )

        def points() -> int:
            with self._call(name):
                return self.client.count(self._full(name), exact=True).count

        return reads.evidence(
            rescored.get("bm25", []), rescored.get("cosine", []), lists[2:], vectors, terms=terms, points=points
        )

    def payloads(self, name: str, ids: Sequence[str]) -> dict[str, Any]:
        if not ids:
            self._require(name)
            return {}
        with self._call(name):
            records = self.client.retrieve(self._full(name), ids=engine_ids(ids), with_payload=True, with_vectors=False)
        return {str(r.id): r.payload or {} for r in records}

    def search_defaults(self, name: str) -> SearchDefaults:
        with self._call(name):
            metadata = self.client.get_collection(self._full(name)).config.metadata or {}
        return defaults_from(metadata.get(_DEFAULTS_KEY))

    def set_search_defaults(self, name: str, defaults: SearchDefaults) -> None:
        with self._call(name):
            self.client.update_collection(self._full(name), metadata={_DEFAULTS_KEY: dataclasses.asdict(defaults)})

    def collection_record(self, name: str, key: str) -> Any | None:
        field = _RECORD_KEY.format(key=checked_record_key(key))
        with self._call(name):
            metadata = self.client.get_collection(self._full(name)).config.metadata or {}
        return metadata.get(field)

    def set_collection_record(self, name: str, key: str, value: Any | None) -> None:
        # Qdrant merges the metadata given into the collection's (top-level keys); a key set to null is removed.
        field = _RECORD_KEY.format(key=checked_record_key(key))
        with self._call(name):
            self.client.update_collection(self._full(name), metadata={field: value})

    def stats(self, name: str) -> CollectionStats:
        first_chunks = models.Filter(must=[models.FieldCondition(key="chunk_index", match=models.MatchValue(value=0))])
        with self._call(name):
            chunks = self.client.count(self._full(name), exact=True).count
            documents = self.client.count(self._full(name), count_filter=first_chunks, exact=True).count
        return CollectionStats(name=name, documents=documents, chunks=chunks)

    def close(self) -> None:
        with self._call():
            self.client.close()


def _is_not_found(exc: Exception, full_name: str) -> bool:
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    if isinstance(exc, grpc.RpcError) and callable(getattr(exc, "code", None)):
        return exc.code() == grpc.StatusCode.NOT_FOUND
    return isinstance(exc, ValueError) and str(exc) == f"Collection {full_name} not found"


def _vector(query: Query, kind: str) -> Any:
    if kind == "dense":
        if query.dense is None:
            raise ValueError(f"a {query.mode} query needs a dense vector")
        return list(query.dense)
    if query.sparse is None:
        raise ValueError(f"a {query.mode} query needs a sparse vector")
    return models.SparseVector(indices=list(query.sparse.indices), values=list(query.sparse.values))


def _client_filter(conds: list[Condition]) -> models.Filter | None:
    if not conds:
        return None
    return models.Filter(must=[_client_condition(c) for c in conds])


def _client_condition(cond: Condition) -> Any:
    options: list[Any] = []
    if cond.strings:
        options.append(models.FieldCondition(key=cond.path, match=models.MatchAny(any=list(cond.strings))))
    if cond.integers:
        options.append(models.FieldCondition(key=cond.path, match=models.MatchAny(any=list(cond.integers))))
    for value in cond.floats:
        options.append(models.FieldCondition(key=cond.path, range=models.Range(gte=value, lte=value)))
    for flag in cond.bools:
        options.append(models.FieldCondition(key=cond.path, match=models.MatchValue(value=flag)))
    return options[0] if len(options) == 1 else models.Filter(should=options)
