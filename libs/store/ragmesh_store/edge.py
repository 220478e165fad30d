"""`EdgeStore`: the embedded store on qdrant-edge-py (Qdrant's own engine, in process).

Layout: `<data_dir>/.lock` (the process that owns the directory, `fcntl.flock`), `<data_dir>/ragmesh-store.json`
(the format version, see FORMAT_VERSION) and one EdgeShard per collection under `<data_dir>/collections/<name>/`.
The WAL stays on: an acknowledged write survives a killed process. Segments are flushed by a background thread
every `flush_interval` seconds (default 5, a Qdrant server's `flush_interval_sec`: WAL first, flush later), so a
write does not wait for a flush (25-50 ms here); with `flush_interval=0` every write is flushed before it returns
(group commit), for an OS crash too. qdrant-edge-py holds the GIL while it flushes (60-90 ms during a busy ingest
here): every Python thread of the process, the model's included, waits for each flush, hence not every second.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import qdrant_edge as qe
from ragmesh_common.threads import name_os_thread
from ragmesh_common.validation import COLLECTION_NAME_RE

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
    tie_key,
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
    StoreBusyError,
    StoreError,
    StoreFormatError,
)

log = logging.getLogger(__name__)
_TRASH_PREFIX = ".deleting-"
_DEFAULTS_FILE = "ragmesh-search-defaults.json"  # inside the shard's directory, so it goes with the collection
_RECORD_FILE = "ragmesh-record-{key}.json"  # a collection record (Store.set_collection_record), beside it
_SCROLL_PAGE = 1024
# The on-disk format of a data directory. Bump it when a release writes something older releases cannot read,
# and teach `_check_format` to upgrade from the versions before it.
FORMAT_VERSION = 1
FORMAT_FILE = "ragmesh-store.json"
_SCHEMAS: dict[IndexKind, qe.PayloadSchemaType] = {
    "keyword": qe.PayloadSchemaType.Keyword,
    "integer": qe.PayloadSchemaType.Integer,
    "float": qe.PayloadSchemaType.Float,
    "bool": qe.PayloadSchemaType.Bool,
}


def busy_message(data_dir: Path, pid: str) -> str:
    return (
        f"the embedded store at RAGMESH_DATA_DIR={data_dir} is already open in another process (pid {pid}); "
        "stop that process or set RAGMESH_DATA_DIR to another directory. The indexer and search share one store: "
        "run them in one process (`ragmesh serve indexer search` or `ragmesh up`), or set QDRANT_URL to use a "
        "Qdrant server"
    )


def lock_data_dir(data_dir: Path, *, busy_hint: str = "") -> int:
    """Own `data_dir` (an exclusive `flock` on its .lock, holding this process's pid); returns the descriptor,
    whose closing releases it. StoreBusyError naming the holder when another process owns it."""
    fd = os.open(data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StoreBusyError(busy_message(data_dir, holder) + busy_hint) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def read_format(data_dir: Path) -> dict[str, Any] | None:
    """The format record of a data directory ({"format_version", "created_by", ...}), None when it has none."""
    try:
        record = json.loads((data_dir / FORMAT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StoreFormatError(f"cannot read {data_dir / FORMAT_FILE}: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("format_version"), int):
        raise StoreFormatError(f"{data_dir / FORMAT_FILE} is not a ragmesh store format record")
    return record


def write_format(data_dir: Path, version: int = FORMAT_VERSION) -> None:
    """Record the format of a data directory (atomically: never a half-written file)."""
    from importlib.metadata import version as package_version

    record = {"format_version": version, "created_by": f"ragmesh-store {package_version('ragmesh-store')}"}
    temporary = data_dir / f"{FORMAT_FILE}.tmp"
    temporary.write_text(json.dumps(record), encoding="utf-8")
    os.replace(temporary, data_dir / FORMAT_FILE)


def check_format(data_dir: Path) -> None:
    """Refuse a data directory written in a format this version cannot read; record the format of a new one
    (or of one made before formats were recorded, which is version 1)."""
    record = read_format(data_dir)
    if record is None:
        write_format(data_dir)
        return
    found = record["format_version"]
    if found > FORMAT_VERSION or found < 1:
        raise StoreFormatError(
            f"the embedded store at RAGMESH_DATA_DIR={data_dir} has format version {found} "
            f"(written by {record.get('created_by', 'an unknown version')}), and this ragmesh reads version "
            f"{FORMAT_VERSION}: run the ragmesh release that wrote it, or restore a snapshot into a new "
            "RAGMESH_DATA_DIR"
        )


class _Collection:
    """One open shard. Any number of threads use it at once; `close` waits for them and then excludes them."""

    def __init__(self, name: str, path: Path, shard: qe.EdgeShard) -> None:
        self.name = name
        self.path = path
        self.shard = shard
        self.indexed = set(shard.info().payload_schema)
        self.index_lock = threading.Lock()
        self._cond = threading.Condition()
        self._users = 0
        self._closed = False
        self._sync = threading.Condition()
        self._writes = 0  # writes applied so far (tickets)
        self._synced = 0  # writes covered by a finished flush
        self._flushing = False
        self.defaults = _read_defaults(path / _DEFAULTS_FILE)
        # The collection records as read or written (key -> JSON text, None: no record): this process owns the
        # directory, so only `set_collection_record` changes them, and the indexer reads one per document.
        self.records: dict[str, str | None] = {}
        self.record_lock = threading.Lock()  # a read that misses and a write never interleave

    @contextlib.contextmanager
    def use(self) -> Iterator[qe.EdgeShard]:
        with self._cond:
            if self._closed:
                raise CollectionNotFound(self.name)
            self._users += 1
        try:
            yield self.shard
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()

    def written(self, shard: qe.EdgeShard, *, flush: bool) -> None:
        """Record a write; with `flush`, flush before returning (group commit: a write that lands while another
        thread is flushing waits for that flush and then shares the next one, so N concurrent writers cost
        about two flushes, not N)."""
        with self._sync:
            self._writes += 1
            if flush:
                self._flush_through(self._writes, shard)

    def flush_pending(self) -> None:
        """Flush if any write is not covered by a flush yet (the background flusher calls this)."""
        with self._sync:
            if self._synced < self._writes:
                with self.use() as shard:
                    self._flush_through(self._writes, shard)

    def _flush_through(self, ticket: int, shard: qe.EdgeShard) -> None:
        """Flush until write `ticket` is covered; the caller holds `_sync`."""
        while self._synced < ticket:
            if self._flushing:
                self._sync.wait()
                continue
            self._flushing, covered = True, self._writes
            self._sync.release()
            try:
                shard.flush()
            finally:
                self._sync.acquire()
                self._flushing = False
                self._sync.notify_all()
            self._synced = max(self._synced, covered)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._users == 0)
        self.shard.close()


class EdgeStore(DocumentReads):
    """The `Store` on qdrant-edge-py. One instance per data directory per machine: the indexer and search
    share it in one process (it is thread-safe); a second process gets `StoreBusyError`."""

    # qdrant-edge holds the GIL while it searches (a dense query at 20,000 points: ~2 of its 3 ms), and turning a
    # string (UUID) point id into its own gives the GIL up and takes it back once per id (0.12 ms for 100 ids alone,
    # 45-62 ms with one busy Python thread beside it). From a worker thread, each of those hand-backs waits for the
    # event loop's thread: a convoy. On the caller's thread there is nothing to wait for.
    holds_gil = True

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        dimension: int,
        *,
        hnsw_ef: int | None = None,
        flush_interval: float = 5.0,
        hnsw_m: int = 16,
        hnsw_ef_construct: int = 100,
        search_threads: int = 1,
    ) -> None:
        self.dimension = dimension
        self._search_threads = search_threads
        self._hnsw = qe.HnswIndexConfig(m=hnsw_m, ef_construct=hnsw_ef_construct, full_scan_threshold=10_000)
        self._flush_interval = flush_interval
        self.data_dir = Path(data_dir).resolve()
        self._hnsw_ef = hnsw_ef
        self._collections_dir = self.data_dir / "collections"
        self._collections_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._take_ownership()
        try:
            check_format(self.data_dir)
        except BaseException:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            raise
        self._lock = threading.RLock()  # guards _open and creating/deleting collections
        self._open: dict[str, _Collection] = {}
        self._closed = False
        for leftover in self._collections_dir.glob(f"{_TRASH_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)  # a delete interrupted by a crash
        self._stop_flusher = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval > 0:
            self._flusher = threading.Thread(target=self._flush_loop, name="ragmesh-store-flush", daemon=True)
            self._flusher.start()

    def _flush_loop(self) -> None:
        name_os_thread()
        while not self._stop_flusher.wait(self._flush_interval):
            self.flush()

    def flush(self) -> None:
        """Flush every collection with writes not flushed yet."""
        with self._lock:
            collections = list(self._open.values())
        for collection in collections:
            try:
                collection.flush_pending()
            except CollectionNotFound:
                pass  # deleted meanwhile
            except Exception:  # noqa: BLE001 - the next round retries; the WAL still has the writes
                log.exception("flushing collection %s failed", collection.name)

    # --- ownership ---------------------------------------------------------------------------------------
    def _take_ownership(self) -> int:
        return lock_data_dir(self.data_dir)

    @contextlib.contextmanager
    def _edge_errors(self) -> Iterator[None]:
        """qdrant-edge raises bare `Exception`s: make them StoreError (StoreBusyError for a held WAL)."""
        try:
            yield
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - the binding has no exception types of its own
            if "WouldBlock" in str(exc):
                raise StoreBusyError(busy_message(self.data_dir, "unknown")) from exc
            raise StoreError(f"embedded store: {exc}") from exc

    # --- collections -------------------------------------------------------------------------------------
    def _path(self, name: str) -> Path:
        return self._collections_dir / checked_name(name)

    def _config(self) -> qe.EdgeConfig:
        return qe.EdgeConfig(
            vectors={DENSE: qe.EdgeVectorParams(size=self.dimension, distance=qe.Distance.Cosine)},
            sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
            hnsw_config=self._hnsw,
            # qdrant-edge would size each shard's search pool from the host's CPUs (8 threads per collection on a
            # 2-core container). With one thread a query runs on its caller's thread, without a hand-over to the
            # pool and back (see StoreSettings.search_threads).
            max_search_threads=self._search_threads,
        )

    def _get(self, name: str) -> _Collection:
        """The open collection, loading it from disk on first use; CollectionNotFound if it does not exist."""
        with self._lock:
            if self._closed:
                raise StoreError("the embedded store is closed")
            if (open_ := self._open.get(name)) is not None:
                return open_
            path = self._path(name)
            if not path.is_dir():
                raise CollectionNotFound(name)
            with self._edge_errors():
                shard = qe.EdgeShard.load(str(path), self._config())
                indexed = set(shard.info().payload_schema)
                for field, kind in FIXED_INDEXES.items():  # fields added since the collection was created
                    if field not in indexed:
                        shard.update(qe.UpdateOperation.create_field_index(field, _SCHEMAS[kind]))
            collection = self._open[name] = _Collection(name, path, shard)
            return collection

    def ensure_collection(self, name: str) -> bool:
        with self._lock:
            try:
                self._get(name)
                return False
            except CollectionNotFound:
                pass
            path = self._path(name)
            with self._edge_errors():
                shard = qe.EdgeShard.create(str(path), self._config())
                for field, kind in FIXED_INDEXES.items():
                    shard.update(qe.UpdateOperation.create_field_index(field, _SCHEMAS[kind]))
                shard.flush()
            self._open[name] = _Collection(name, path, shard)
            return True

    def collection_exists(self, name: str) -> bool:
        with self._lock:
            return name in self._open or self._path(name).is_dir()

    def list_collections(self) -> list[str]:
        # Only collections' own names: the versions above 1 (`<name>.v<n>`) are not listed.
        with self._lock:
            return sorted(
                p.name for p in self._collections_dir.iterdir() if p.is_dir() and COLLECTION_NAME_RE.fullmatch(p.name)
            )

    def delete_collection(self, name: str) -> int:
        with self._lock:
            collection = self._get(name)
            with collection.use() as shard, self._edge_errors():
                chunks = shard.count(qe.CountRequest(exact=True))
            del self._open[name]
            collection.close()
            trash = self._collections_dir / f"{_TRASH_PREFIX}{name}-{uuid.uuid4().hex}"
            collection.path.rename(trash)  # atomic: a crash never leaves a half-deleted collection
            shutil.rmtree(trash, ignore_errors=True)
            return chunks

    # --- writes --------------------------------------------------------------------------------------------
    def upsert(self, name: str, points: Sequence[ChunkPoint]) -> None:
        collection = self._get(name)
        if not points:
            return
        edge_points = [
            qe.Point(
                engine_id(p.id),
                {DENSE: list(p.dense), SPARSE: qe.SparseVector(list(p.sparse.indices), list(p.sparse.values))},
                dict(p.payload),
            )
            for p in points
        ]
        with collection.use() as shard, self._edge_errors():
            self._index_metadata(collection, shard, points)
            shard.update(qe.UpdateOperation.upsert_points(edge_points))
            collection.written(shard, flush=self._flush_interval == 0)

    def _index_metadata(self, collection: _Collection, shard: qe.EdgeShard, points: Sequence[ChunkPoint]) -> None:
        """Create a payload index for each metadata key seen for the first time (filters need one)."""
        new = {path: kind for path, kind in metadata_indexes(points).items() if path not in collection.indexed}
        if not new:
            return
        with collection.index_lock:
            for path, kind in new.items():
                if path not in collection.indexed:
                    shard.update(qe.UpdateOperation.create_field_index(path, _SCHEMAS[kind]))
                    collection.indexed.add(path)

    def delete_points(self, name: str, ids: Sequence[str]) -> None:
        collection = self._get(name)
        if not ids:
            return
        with collection.use() as shard, self._edge_errors():
            shard.update(qe.UpdateOperation.delete_points(engine_ids(ids)))
            collection.written(shard, flush=self._flush_interval == 0)

    def clear_points(self, name: str) -> int:
        collection = self._get(name)
        with collection.use() as shard, self._edge_errors():
            chunks = shard.count(qe.CountRequest(exact=True))
            shard.update(qe.UpdateOperation.delete_points_by_filter(qe.Filter()))  # no condition: every point
            collection.written(shard, flush=self._flush_interval == 0)
        return chunks

    def delete_document(self, name: str, doc_id: str) -> int:
        ids = self.document_chunk_ids(name, doc_id)
        self.delete_points(name, ids)
        return len(ids)

    # --- reads ---------------------------------------------------------------------------------------------
    def _scroll(self, name: str, doc_id: str, with_payload: Any, limit: int | None = None) -> list[qe.Record]:
        collection = self._get(name)
        doc_filter = qe.Filter(must=[qe.FieldCondition("doc_id", match=qe.MatchValue(doc_id))])
        records: list[qe.Record] = []
        offset = None
        with collection.use() as shard, self._edge_errors():
            while True:
                page = _SCROLL_PAGE if limit is None else limit
                batch, offset = shard.scroll(
                    qe.ScrollRequest(offset=offset, limit=page, filter=doc_filter, with_payload=with_payload)
                )
                records.extend(batch)
                if offset is None or limit is not None:
                    return records

    def list_documents(
        self, name: str, filters: Mapping[str, FilterValue], fields: Sequence[str]
    ) -> list[dict[str, Any]]:
        collection = self._get(name)
        edge_filter = _edge_filter(first_chunk_conditions(filters))
        rows: list[dict[str, Any]] = []
        offset = None
        with collection.use() as shard, self._edge_errors():
            while True:
                batch, offset = shard.scroll(
                    qe.ScrollRequest(
                        offset=offset, limit=_SCROLL_PAGE, filter=edge_filter, with_payload=["doc_id", *fields]
                    )
                )
                rows.extend(document_row(r.payload, fields) for r in batch)
                if offset is None:
                    return sorted(rows, key=lambda row: str(row["doc_id"]))

    def query(self, name: str, query: Query) -> list[Hit]:
        if query.mode == "hybrid" and query.fusion == "relative_score":
            return self._relative_score(name, query)
        return self._query(name, query)

    def _relative_score(self, name: str, query: Query) -> list[Hit]:
        """Relative score fusion with candidate lists that carry no payloads (turning hundreds of payloads into
        dicts costs more than the searches): the whole fused list comes back (limit = the candidate depth), the
        top `limit` and every hit tied with the last of them get their payloads, and tie_key orders them."""
        depth = max(query.prefetch_limit, query.limit)
        fused = relative_score_query(
            functools.partial(self._query, name, payload=False), dataclasses.replace(query, limit=depth)
        )
        if len(fused) > query.limit:
            cut = fused[query.limit - 1].score
            fused = [h for h in fused if h.score >= cut]
        if not fused:
            return fused
        collection = self._get(name)
        with collection.use() as shard, self._edge_errors():
            records = shard.retrieve(engine_ids(h.id for h in fused), with_payload=True, with_vector=False)
        payloads = {str(r.id): r.payload or {} for r in records}
        return sorted((Hit(h.id, h.score, payloads.get(h.id, {})) for h in fused), key=tie_key)[: query.limit]

    def _query(self, name: str, query: Query, payload: bool | list[str] = True) -> list[Hit]:
        collection = self._get(name)
        edge_filter = _edge_filter(conditions(query.filters))
        params = qe.SearchParams(hnsw_ef=self._hnsw_ef) if self._hnsw_ef else None
        if query.mode == "hybrid":
            prefetch_limit = max(query.prefetch_limit, query.limit)
            prefetches = [
                qe.Prefetch(limit=prefetch_limit, query=_nearest(query, "dense"), filter=edge_filter, params=params),
                qe.Prefetch(limit=prefetch_limit, query=_nearest(query, "sparse"), filter=edge_filter),
            ]
            weights = list(query.rrf_weights) if query.rrf_weights else None
            scoring: Any = qe.Fusion.Dbsf() if query.fusion == "dbsf" else qe.Fusion.Rrf(k=query.rrf_k, weights=weights)
        else:
            prefetches, scoring = None, _nearest(query, query.mode)

        def run(limit: int) -> list[Hit]:
            request = qe.QueryRequest(
                limit=limit,
                query=scoring,
                prefetches=prefetches,
                filter=edge_filter,
                score_threshold=query.score_threshold,
                params=params if query.mode == "dense" else None,
                with_payload=payload,
            )
            with collection.use() as shard, self._edge_errors():
                return [Hit(str(p.id), p.score, p.payload or {}) for p in shard.query(request)]

        return stable_query(run, query.limit)

    def hybrid_evidence(
        self, name: str, query: Query, vectors_of: int = 0, same_sparse_as: HybridEvidence | None = None
    ) -> HybridEvidence:
        collection = self._get(name)
        edge_filter = _edge_filter(conditions(query.filters))
        params = qe.SearchParams(hnsw_ef=self._hnsw_ef) if self._hnsw_ef else None
        depth = evidence_depth(query)
        dense, sparse = _nearest(query, "dense"), _nearest(query, "sparse")
        terms = list(query.sparse.indices) if query.sparse and same_sparse_as is None else []

        def nearest(vector: qe.Query, limit: int, **options: Any) -> qe.QueryRequest:
            return qe.QueryRequest(
                limit=limit, query=vector, filter=edge_filter, params=params if vector is dense else None, **options
            )

        def by_id(vector: qe.Query, ids: set[str]) -> qe.QueryRequest:
            # An exact score of a few points (re-running the other list's search as a prefetch costs several times
            # more); a chunk without any query term is left out of a BM25 one, as search leaves it out.
            return qe.QueryRequest(
                limit=len(ids),
                query=vector,
                filter=qe.Filter(must=[qe.HasIdCondition({engine_id(i) for i in ids})]),
                params=qe.SearchParams(exact=True) if vector is dense else None,
                with_payload=False,
            )

        requests = [nearest(dense, depth, with_payload=False)]
        if same_sparse_as is None:  # else its sparse list, BM25 scores and IDFs are this query's too
            requests.append(nearest(sparse, depth, with_payload=False))
            # One single-term BM25 query per query term, unfiltered: its best chunk's score / the term's weight in
            # that chunk is the term's IDF.
            requests += [
                qe.QueryRequest(
                    limit=1, query=qe.Query.Nearest(qe.SparseVector([t], [1.0]), using=SPARSE), with_vector=[SPARSE]
                )
                for t in terms
            ]
        with collection.use() as shard, self._edge_errors():
            lists = list(shard.query_batch(qe.QueryBatchRequest(requests)))
            reads = EvidenceReads(query, lists[0], lists[1] if same_sparse_as is None else [], same_sparse_as)
            # The candidates that lack one of their two scores, scored by id.
            rescoring = {
                kind: by_id(vector, ids)
                for kind, vector, ids in (("cosine", dense, reads.need_cosine), ("bm25", sparse, reads.need_bm25))
                if ids
            }
            rescored = dict(
                zip(
                    rescoring,
                    shard.query_batch(qe.QueryBatchRequest(list(rescoring.values()))) if rescoring else [],
                    strict=True,
                )
            )
            # The feedback vectors, read by id (two more searches returning vectors cost several times more).
            top = reads.vector_ids(vectors_of)
            vectors = [shard.retrieve(engine_ids(top), False, [DENSE])] if top else []

            def points() -> int:
                return shard.info().points_count

            return reads.evidence(
                rescored.get("bm25", []), rescored.get("cosine", []), lists[2:], vectors, terms=terms, points=points
            )

    def payloads(self, name: str, ids: Sequence[str]) -> dict[str, Any]:
        collection = self._get(name)
        if not ids:
            return {}
        with collection.use() as shard, self._edge_errors():
            return {str(r.id): r.payload or {} for r in shard.retrieve(engine_ids(ids), True, False)}

    def stats(self, name: str) -> CollectionStats:
        collection = self._get(name)
        first_chunks = qe.Filter(must=[qe.FieldCondition("chunk_index", match=qe.MatchValue(0))])
        with collection.use() as shard, self._edge_errors():
            chunks = shard.count(qe.CountRequest(exact=True))
            documents = shard.count(qe.CountRequest(exact=True, filter=first_chunks))
        return CollectionStats(name=name, documents=documents, chunks=chunks)

    def search_defaults(self, name: str) -> SearchDefaults:
        return self._get(name).defaults

    def set_search_defaults(self, name: str, defaults: SearchDefaults) -> None:
        collection = self._get(name)
        with collection.use():
            _write_json(collection.path / _DEFAULTS_FILE, dataclasses.asdict(defaults))
            collection.defaults = defaults

    def collection_record(self, name: str, key: str) -> Any | None:
        collection = self._get(name)
        with collection.record_lock:
            # A cached key was checked when it was read (the indexer asks twice per document: no path to build).
            if key in collection.records:
                text = collection.records[key]
            else:
                path = self._record_path(collection, key)
                try:
                    text = path.read_text(encoding="utf-8")
                except FileNotFoundError:
                    text = None
                except OSError as exc:
                    raise StoreError(f"cannot read {path}: {exc}") from None
                collection.records[key] = text
        try:
            return None if text is None else json.loads(text)  # a new value each call: callers may change it
        except ValueError as exc:
            raise StoreError(f"cannot read {self._record_path(collection, key)}: {exc}") from None

    @staticmethod
    def _record_path(collection: _Collection, key: str) -> Path:
        return collection.path / _RECORD_FILE.format(key=checked_record_key(key))

    def set_collection_record(self, name: str, key: str, value: Any | None) -> None:
        collection = self._get(name)
        target = self._record_path(collection, key)
        with collection.use(), collection.record_lock:
            collection.records.pop(key, None)  # read from the file again if the write fails half-way
            if value is None:
                target.unlink(missing_ok=True)
            else:
                _write_json(target, value)

    def optimize(self, name: str) -> bool:
        """Build the HNSW and payload indexes of the collection's segments. Until then dense search scans the
        vectors (fine to ~100k chunks). Blocking, minutes at 1M points, and qdrant-edge-py 0.9 holds the GIL
        for the whole build (every other thread of the process stops): run it while nothing else is served."""
        collection = self._get(name)
        with collection.use() as shard, self._edge_errors():
            return shard.optimize()

    def close(self) -> None:
        self._stop_flusher.set()
        if self._flusher is not None:
            self._flusher.join()
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            collections, self._open = list(self._open.values()), {}
            for collection in collections:
                with contextlib.suppress(Exception):
                    collection.close()
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)


def _write_json(target: Path, value: Any) -> None:
    """Write a JSON file atomically (never a half-written file) and durably (fsync'd before it replaces the old
    one)."""
    temporary = target.with_suffix(".tmp")
    with temporary.open("w", encoding="utf-8") as f:
        json.dump(value, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, target)


def _read_defaults(path: Path) -> SearchDefaults:
    try:
        return defaults_from(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return SearchDefaults()


def _nearest(query: Query, kind: str) -> qe.Query:
    if kind == "dense":
        if query.dense is None:
            raise ValueError(f"a {query.mode} query needs a dense vector")
        return qe.Query.Nearest(list(query.dense), using=DENSE)
    if query.sparse is None:
        raise ValueError(f"a {query.mode} query needs a sparse vector")
    return qe.Query.Nearest(qe.SparseVector(list(query.sparse.indices), list(query.sparse.values)), using=SPARSE)


def _edge_filter(conds: list[Condition]) -> qe.Filter | None:
    if not conds:
        return None
    return qe.Filter(must=[_edge_condition(c) for c in conds])


def _edge_condition(cond: Condition) -> Any:
    options: list[Any] = []
    if cond.strings:
        options.append(qe.FieldCondition(cond.path, match=qe.MatchAny(list(cond.strings))))
    if cond.integers:
        options.append(qe.FieldCondition(cond.path, match=qe.MatchAny(list(cond.integers))))
    for value in cond.floats:
        options.append(qe.FieldCondition(cond.path, range=qe.RangeFloat(gte=value, lte=value)))
    for flag in cond.bools:
        # The binding reads a Python bool as the integer 0/1 (bool subclasses int), which never equals a
        # stored boolean; numpy's bool is converted as a real boolean (the binding's stub admits only bool).
        options.append(qe.FieldCondition(cond.path, match=qe.MatchValue(np.bool_(flag))))  # type: ignore[arg-type]
    return options[0] if len(options) == 1 else qe.Filter(should=options)
