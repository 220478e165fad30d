"""Adapter-independent pieces both stores share: filter normalisation, payload-index kinds, tie-breaking."""

from __future__ import annotations

import dataclasses
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from uuid import UUID

from ragmesh_common.validation import COLLECTION_NAME_RE

from .base import (
    DENSE,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    METADATA_PREFIX,
    PATH_PREFIX_FILTER,
    PATH_PREFIXES_FIELD,
    RECORD_KEY_RE,
    SPARSE,
    ChunkPoint,
    FilterValue,
    Hit,
    HybridEvidence,
    Mode,
    Query,
    SearchDefaults,
)
from .versions import VERSION_NAME_RE

IndexKind = Literal["keyword", "integer", "float", "bool"]
Scalar = str | int | float | bool

# The payload indexes every collection gets at creation.
FIXED_INDEXES: dict[str, IndexKind] = {
    **dict.fromkeys(KEYWORD_FIELDS, "keyword"),
    **dict.fromkeys(INTEGER_FIELDS, "integer"),
}
EVIDENCE_TIE_ROOM = 16
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+$")


def is_store_name(name: str) -> bool:
    """True for a collection's name or the name of one of its versions (`<name>.v<n>`)."""
    version = VERSION_NAME_RE.fullmatch(name)
    return COLLECTION_NAME_RE.fullmatch(version["name"] if version else name) is not None


def engine_id(point_id: str) -> int | str:
    """A point id as Qdrant takes it. Point ids are strings here: decimal digits are a numeric id (what the indexer
    writes), anything else a UUID (what it wrote before; a collection may hold both until its documents are
    re-indexed).
    Qdrant hands a numeric id back as a Python int, whose `str` is one C call, where a UUID id comes back as a new
    `uuid.UUID` object and its `str` runs Python code; the ids an adaptive hybrid search reads (~430) cost ~0.6 ms
    more as UUIDs, and the engine gives the GIL up and takes it back once per UUID string handed to it."""
    return int(point_id) if point_id.isascii() and point_id.isdigit() else point_id


def engine_ids(point_ids: Iterable[str]) -> list[int | str | UUID]:  # the list type the engines' APIs take
    return [engine_id(i) for i in point_ids]


def checked_name(name: str) -> str:
    """The collection name (or the name of one of its versions, `<name>.v<n>`), or ValueError (services validate
    first; this guards paths and prefixes)."""
    if not is_store_name(name):
        raise ValueError(f"invalid collection name {name!r}")
    return name


def checked_record_key(key: str) -> str:
    """The collection record key, or ValueError (see `Store.set_collection_record`)."""
    if not RECORD_KEY_RE.fullmatch(key):
        raise ValueError(f"invalid collection record key {key!r}")
    return key


def metadata_path(key: str) -> str:
    """The payload path of user metadata `key` (quoted when it holds '.', '-', ... so it is not nested)."""
    return f"{METADATA_PREFIX}{key}" if _PLAIN_KEY.fullmatch(key) else f'{METADATA_PREFIX}"{key}"'


def payload_path(filter_key: str) -> str:
    """`metadata.<key>` -> the metadata path; `path_prefix` -> the ancestor-folder list; any other key is a
    top-level payload field."""
    if filter_key.startswith(METADATA_PREFIX):
        return metadata_path(filter_key[len(METADATA_PREFIX) :])
    if filter_key == PATH_PREFIX_FILTER:
        return PATH_PREFIXES_FIELD
    return filter_key


def path_prefixes(path: str) -> list[str]:
    """The folders a relative POSIX path lies in, outermost first, then the path itself:
    "a/b/c.py" -> ["a", "a/b", "a/b/c.py"]."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def normalise_prefix(value: str) -> str:
    """A path_prefix filter value as stored: no leading "./", no trailing "/"."""
    value = value.strip()
    while value.startswith("./"):
        value = value[2:]
    return value.rstrip("/")


def index_kind(value: object) -> IndexKind | None:
    """The payload index that makes exact-match filters on `value` fast (None: not indexable)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "keyword"
    return None


def metadata_indexes(points: Iterable[ChunkPoint]) -> dict[str, IndexKind]:
    """Payload path -> index kind for every user metadata key in `points` (first value's type wins)."""
    found: dict[str, IndexKind] = {}
    for point in points:
        metadata = point.payload.get("metadata") or {}
        for key, value in metadata.items():
            path = metadata_path(key)
            if path not in found and (kind := index_kind(value)) is not None:
                found[path] = kind
    return found


@dataclass(frozen=True)
class Condition:
    """One filter: the payload field at `path` equals any of the values, grouped by type."""

    path: str
    strings: tuple[str, ...] = ()
    integers: tuple[int, ...] = ()
    floats: tuple[float, ...] = ()
    bools: tuple[bool, ...] = ()


def conditions(filters: Mapping[str, FilterValue]) -> list[Condition]:
    """Normalise `Query.filters` (value or list of values = any of them); an empty list is a ValueError."""
    out = []
    for key, raw in filters.items():
        values: Sequence[Any] = [raw] if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence) else raw
        if not values:
            raise ValueError(f"filter {key!r} has no values")
        strings, integers, floats, bools = [], [], [], []
        for value in values:
            if isinstance(value, bool):
                bools.append(value)
            elif isinstance(value, int):
                integers.append(value)
            elif isinstance(value, float):
                floats.append(value)
            elif isinstance(value, str):
                strings.append(value)
            else:
                raise ValueError(f"filter {key!r}: unsupported value {value!r}")
        if key == PATH_PREFIX_FILTER:
            strings = [normalise_prefix(s) for s in strings]
        out.append(
            Condition(payload_path(key), tuple(strings), tuple(integers), tuple(floats), tuple(dict.fromkeys(bools)))
        )
    return out


def first_chunk_conditions(filters: Mapping[str, FilterValue]) -> list[Condition]:
    """`filters` plus chunk_index = 0: one point per document (list_documents)."""
    return [*conditions(filters), Condition("chunk_index", integers=(0,))]


def document_row(payload: Mapping[str, Any] | None, fields: Sequence[str]) -> dict[str, Any]:
    payload = payload or {}
    return {key: payload.get(key) for key in ("doc_id", *fields)}


class DocumentReads:
    """The reads of one document's chunks, the same in both stores given each store's `_scroll` (the points
    whose doc_id is `doc_id`, every page of them, or only the first `limit`)."""

    def _scroll(self, name: str, doc_id: str, with_payload: Any, limit: int | None = None) -> Sequence[Any]:
        raise NotImplementedError

    def document_chunks(self, name: str, doc_id: str) -> list[Hit]:
        hits = [Hit(str(r.id), 0.0, r.payload or {}) for r in self._scroll(name, doc_id, True)]
        return sorted(hits, key=chunk_order_key)

    def document_chunk_ids(self, name: str, doc_id: str) -> list[str]:
        return [str(r.id) for r in self._scroll(name, doc_id, False)]

    def document_hash(self, name: str, doc_id: str) -> str | None:
        records = self._scroll(name, doc_id, ["content_hash"], limit=1)
        return records[0].payload.get("content_hash") if records and records[0].payload else None


def tie_key(hit: Hit) -> tuple[float, str, int, str]:
    """Best first; equal scores by (doc_id, chunk_index, id) so results are the same on every call."""
    return (-hit.score, str(hit.payload.get("doc_id", "")), _int(hit.payload.get("chunk_index")), hit.id)


def chunk_order_key(hit: Hit) -> tuple[int, str]:
    return (_int(hit.payload.get("chunk_index")), hit.id)


def stable_query(run: Callable[[int], list[Hit]], limit: int, *, max_fetch: int = 10_000) -> list[Hit]:
    """Run `run(fetch_limit)` (best first, ties in any order) and return the top `limit` in `tie_key` order.

    The engine may cut a group of equal scores anywhere, so which tied points make the cut would vary between
    calls. Fetching past `limit` until the score at the cut-off is strictly above the last fetched one (or
    everything was fetched) makes the whole tie group visible before sorting.
    """
    fetch = limit + 1  # one past the cut shows whether the cut falls inside a group of equal scores
    while True:
        hits = run(fetch)
        cut_inside_ties = len(hits) >= fetch and hits[limit - 1].score == hits[-1].score
        if not cut_inside_ties or fetch >= max_fetch:
            return sorted(hits, key=tie_key)[:limit]
        fetch = min(4 * fetch, max_fetch)


def relative_score_query(query_fn: Callable[[Query], list[Hit]], query: Query) -> list[Hit]:
    """Relative score fusion of a hybrid `query`: the dense and the sparse search (`prefetch_limit` deep, at
    least `limit`), each list's scores min-max normalised to 0..1 (a list whose scores are all equal counts 1),
    then summed with weights `dense_weight` and 1 - `dense_weight` (0 for a list a point is not in)."""
    depth = max(query.prefetch_limit, query.limit)
    fused: dict[str, float] = {}
    payloads: dict[str, Hit] = {}
    sides: tuple[tuple[Mode, float], ...] = (("dense", query.dense_weight), ("sparse", 1.0 - query.dense_weight))
    for mode, weight in sides:
        hits = query_fn(dataclasses.replace(query, mode=mode, limit=depth, score_threshold=None))
        if not hits:
            continue
        low, high = min(h.score for h in hits), max(h.score for h in hits)
        for hit in hits:
            scaled = (hit.score - low) / (high - low) if high > low else 1.0
            fused[hit.id] = fused.get(hit.id, 0.0) + weight * scaled
            payloads.setdefault(hit.id, hit)
    hits = sorted((Hit(i, s, payloads[i].payload) for i, s in fused.items()), key=tie_key)
    if query.score_threshold is not None:
        hits = [h for h in hits if h.score >= query.score_threshold]
    return hits[: query.limit]


def evidence_depth(query: Query) -> int:
    """How deep `hybrid_evidence` reads each list: `EVIDENCE_TIE_ROOM` past the candidates it keeps
    (`prefetch_limit`, at least `limit`), so that which of a few equally scored chunks make the cut does not depend
    on the engine's order (they are cut by `tie_key`). Reading twice as deep, as `stable_query` may, would double
    the cost of the hybrid query for a rare case."""
    return max(query.prefetch_limit, query.limit) + EVIDENCE_TIE_ROOM


def absent_term_idf(points: int) -> float:
    """Qdrant's IDF, ln(1 + (N - n + 0.5) / (n + 0.5)), of a term that no chunk contains (n = 0)."""
    return math.log(1.0 + (points + 0.5) / 0.5)


def term_probe(result: Sequence[Any], term: int) -> tuple[float, float] | None:
    """(score, the term's weight in the chunk) of a single-term BM25 query's best hit (a scored point of either
    client, read with its sparse vector), or None if no chunk has the term."""
    vectors = getattr(result[0], "vector", None) if result else None
    if not isinstance(vectors, dict):
        return None
    weights = dict(zip(vectors[SPARSE].indices, vectors[SPARSE].values, strict=True))
    return result[0].score, weights.get(term, 0.0)


Scored = list[tuple[str, float]]


def scored(result: Sequence[Any]) -> Scored:
    """(id, score) of each scored point of either client, the id turned into a string once (a call reads a few
    hundred points; see `engine_id`)."""
    return [(str(p.id), p.score) for p in result]


class EvidenceReads:
    """What one `hybrid_evidence` call of either adapter read, and what it still has to read: the dense list and the
    sparse list as read (scored points, `evidence_depth` deep), or with `same_sparse_as` no sparse list (that
    earlier evidence's sparse list, BM25 scores and IDFs are reused). Each list's ids are turned into strings and
    the list cut to the candidates it keeps once."""

    def __init__(
        self, query: Query, dense: Sequence[Any], sparse: Sequence[Any], same_sparse_as: HybridEvidence | None = None
    ) -> None:
        self.query = query
        self.same_sparse_as = same_sparse_as
        self.dense_read = scored(dense)
        self.dense = [Hit(i, score, {}) for i, score in self._kept(self.dense_read)]
        if same_sparse_as is None:
            self.sparse_read = scored(sparse)
            # Read without payloads, so equal scores go by id (the order `tie_key` gives hits without payload).
            self.sparse = [Hit(i, score, {}) for i, score in self._kept(self.sparse_read)]
            # Every chunk of the sparse list as read has its BM25 score.
            self.bm25_known: Iterable[tuple[str, float]] = self.sparse_read
            bm25_ids = {i for i, _ in self.sparse_read}
        else:
            self.sparse_read = []
            self.sparse = same_sparse_as.sparse
            # Each candidate of that evidence has its BM25 score there, or holds no query term.
            self.bm25_known = same_sparse_as.sparse_scores.items()
            bm25_ids = {h.id for h in same_sparse_as.dense} | {h.id for h in self.sparse}
        dense_ids = {i for i, _ in self.dense_read}
        # The candidates `hybrid_evidence` scores by id: the sparse list's the dense list did not read (they need
        # their cosine), and the dense list's whose BM25 score is not known yet (they need it).
        self.need_cosine = {h.id for h in self.sparse if h.id not in dense_ids}
        self.need_bm25 = {h.id for h in self.dense if h.id not in bm25_ids}

    def _kept(self, read: Scored) -> Scored:
        """The candidates a list keeps: its best `max(prefetch_limit, limit)`, equal scores by id (two stable sorts
        on C-level keys: by id, then by score, best first, which keeps equal scores in id order)."""
        kept = sorted(read, key=_ID)
        kept.sort(key=_SCORE, reverse=True)
        return kept[: max(self.query.prefetch_limit, self.query.limit)]

    def vector_ids(self, count: int) -> list[str]:
        """The chunks whose dense vectors `hybrid_evidence(..., vectors_of=count)` reads: each list's first
        `count`."""
        if not count:
            return []
        sparse = [i for i, _ in self.sparse_read] if self.same_sparse_as is None else [h.id for h in self.sparse]
        return list(dict.fromkeys([*(i for i, _ in self.dense_read[:count]), *sparse[:count]]))

    def evidence(
        self,
        bm25_by_id: Sequence[Any],
        cosine_by_id: Sequence[Any],
        probes: Sequence[Sequence[Any]] = (),
        vectors: Sequence[Sequence[Any]] = (),
        *,
        terms: Sequence[int] = (),
        points: Callable[[], int],
    ) -> HybridEvidence:
        """`HybridEvidence` from these reads and the rest the store read (scored points of either client): the BM25
        scores and the cosines of `need_bm25` and `need_cosine`, read by id (a chunk without any query term has no
        BM25 score); for each of `terms` the best single-term BM25 hit (read with its sparse vector: score / the
        term's weight in that chunk is the term's IDF, query weights being 1); and, if asked for, points read by id
        with their dense vectors. `points` (the number of chunks) is only called when a term is in no chunk."""
        if self.same_sparse_as is None:
            term_idf: dict[int, float] = {}
            for term, result in zip(terms, probes, strict=True):
                probe = term_probe(result, term)
                term_idf[term] = (
                    probe[0] / probe[1] if probe is not None and probe[1] > 0 else absent_term_idf(points())
                )
        else:
            term_idf = dict(self.same_sparse_as.term_idf)
        # A candidate's score may come from its own list as read (past the cut too) or from the other list's
        # re-score.
        candidates = {h.id for h in self.dense} | {h.id for h in self.sparse}
        dense_scores = {i: score for i, score in (*self.dense_read, *scored(cosine_by_id)) if i in candidates}
        sparse_scores = {i: score for i, score in (*self.bm25_known, *scored(bm25_by_id)) if i in candidates}
        read_vectors: dict[str, Any] = {}
        for result in vectors:
            for p in result:
                read_vectors.setdefault(str(p.id), p)
        return HybridEvidence(
            self.dense, self.sparse, dense_scores, sparse_scores, term_idf, PointVectors(read_vectors)
        )


class PointVectors(Mapping[str, Sequence[float]]):
    """The dense vectors of points read by id (point id -> vector), each turned into a Python list only when it
    is looked up: feedback uses a few of the ~20 read (384 floats each)."""

    def __init__(self, points: Mapping[str, Any]) -> None:
        self._points = points
        self._vectors: dict[str, Sequence[float]] = {}

    def __getitem__(self, point: str) -> Sequence[float]:
        if point not in self._vectors:
            vector = self._points[point].vector
            if not isinstance(vector, dict):  # read without its vector
                raise KeyError(point)
            self._vectors[point] = vector[DENSE]
        return self._vectors[point]

    def __contains__(self, point: object) -> bool:
        try:
            self[point]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return (point for point in self._points if point in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


_ID, _SCORE = operator.itemgetter(0), operator.itemgetter(1)


def defaults_from(raw: Mapping[str, Any] | None) -> SearchDefaults:
    """Stored search defaults (a JSON object) -> SearchDefaults; unknown or invalid values are ignored."""
    raw = raw or {}
    fusion = raw.get("fusion") if raw.get("fusion") in ("rrf", "dbsf", "relative_score", "adaptive") else None
    rrf_k = raw.get("rrf_k") if isinstance(raw.get("rrf_k"), int) and raw["rrf_k"] > 0 else None
    return SearchDefaults(fusion=fusion, rrf_k=rrf_k)


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1
