"""Adapter-independent pieces both stores share: filter normalisation, payload-index kinds, tie-breaking."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragmesh_common.validation import COLLECTION_NAME_RE

from .base import (
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    METADATA_PREFIX,
    ChunkPoint,
    FilterValue,
    Hit,
    Query,
    SearchDefaults,
)

IndexKind = Literal["keyword", "integer", "float", "bool"]
Scalar = str | int | float | bool

# The payload indexes every collection gets at creation.
FIXED_INDEXES: dict[str, IndexKind] = {
    **dict.fromkeys(KEYWORD_FIELDS, "keyword"),
    **dict.fromkeys(INTEGER_FIELDS, "integer"),
}
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+$")


def checked_name(name: str) -> str:
    """The collection name, or ValueError (services validate first; this guards paths and prefixes)."""
    if not COLLECTION_NAME_RE.fullmatch(name):
        raise ValueError(f"invalid collection name {name!r}")
    return name


def metadata_path(key: str) -> str:
    """The payload path of user metadata `key` (quoted when it holds '.', '-', ... so it is not nested)."""
    return f"{METADATA_PREFIX}{key}" if _PLAIN_KEY.fullmatch(key) else f'{METADATA_PREFIX}"{key}"'


def payload_path(filter_key: str) -> str:
    """`metadata.<key>` -> the metadata path; any other key is a top-level payload field."""
    if filter_key.startswith(METADATA_PREFIX):
        return metadata_path(filter_key[len(METADATA_PREFIX) :])
    return filter_key


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
        out.append(
            Condition(payload_path(key), tuple(strings), tuple(integers), tuple(floats), tuple(dict.fromkeys(bools)))
        )
    return out


def tie_key(hit: Hit) -> tuple:
    """Best first; equal scores by (doc_id, chunk_index, id) so results are the same on every call."""
    return (-hit.score, str(hit.payload.get("doc_id", "")), _int(hit.payload.get("chunk_index")), hit.id)


def chunk_order_key(hit: Hit) -> tuple:
    return (_int(hit.payload.get("chunk_index")), hit.id)


def stable_query(run: Callable[[int], list[Hit]], limit: int, *, max_fetch: int = 10_000) -> list[Hit]:
    """Run `run(fetch_limit)` (best first, ties in any order) and return the top `limit` in `tie_key` order.

    The engine may cut a group of equal scores anywhere, so which tied points make the cut would vary between
    calls. Fetching past `limit` until the score at the cut-off is strictly above the last fetched one (or
    everything was fetched) makes the whole tie group visible before sorting.
    """
    fetch = max(2 * limit, limit + 1)
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
    for mode, weight in (("dense", query.dense_weight), ("sparse", 1.0 - query.dense_weight)):
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
    return hits[:query.limit]


def defaults_from(raw: Mapping[str, Any] | None) -> SearchDefaults:
    """Stored search defaults (a JSON object) -> SearchDefaults; unknown or invalid values are ignored."""
    raw = raw or {}
    fusion = raw.get("fusion") if raw.get("fusion") in ("rrf", "dbsf", "relative_score") else None
    rrf_k = raw.get("rrf_k") if isinstance(raw.get("rrf_k"), int) and raw["rrf_k"] > 0 else None
    return SearchDefaults(fusion=fusion, rrf_k=rrf_k)


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1
