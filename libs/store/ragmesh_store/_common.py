"""Adapter-independent pieces both stores share: filter normalisation, payload-index kinds, tie-breaking."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ragmesh_common.validation import COLLECTION_NAME_RE

from .base import INTEGER_FIELDS, KEYWORD_FIELDS, METADATA_PREFIX, ChunkPoint, FilterValue, Hit

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


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1
