"""ragmesh storage: one small interface (`Store`) over Qdrant, embedded (`EdgeStore`) or server
(`QdrantClientStore`); `open_store` picks one from `StoreSettings`."""

from __future__ import annotations

from ._common import engine_id, engine_ids, path_prefixes, tie_key
from .base import (
    DENSE,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    METADATA_PREFIX,
    SPARSE,
    ChunkPoint,
    CollectionNotFound,
    CollectionStats,
    Hit,
    HybridEvidence,
    Query,
    SearchDefaults,
    Sparse,
    Store,
    StoreBusyError,
    StoreError,
    StoreFormatError,
)
from .config import StoreSettings
from .edge import EdgeStore

__all__ = [
    "DENSE",
    "INTEGER_FIELDS",
    "KEYWORD_FIELDS",
    "METADATA_PREFIX",
    "SPARSE",
    "ChunkPoint",
    "CollectionNotFound",
    "CollectionStats",
    "EdgeStore",
    "Hit",
    "HybridEvidence",
    "Query",
    "SearchDefaults",
    "Sparse",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreFormatError",
    "StoreSettings",
    "engine_id",
    "engine_ids",
    "open_store",
    "tie_key",
    "path_prefixes",
]


def open_store(settings: StoreSettings, dimension: int) -> Store:
    """The server store when QDRANT_URL is set, else the embedded store under RAGMESH_DATA_DIR."""
    if settings.qdrant_url:
        from .client import QdrantClientStore

        return QdrantClientStore.from_settings(settings, dimension)
    return EdgeStore(
        settings.data_dir,
        dimension,
        hnsw_ef=settings.hnsw_ef,
        flush_interval=settings.flush_interval_seconds,
        hnsw_m=settings.hnsw_m,
        hnsw_ef_construct=settings.hnsw_ef_construct,
        search_threads=settings.search_threads,
    )
