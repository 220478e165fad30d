"""`StoreSettings`: where the indexer and search keep their chunks (environment only).

Without QDRANT_URL the embedded store (qdrant-edge) lives under RAGMESH_DATA_DIR and only one process may open
it; with QDRANT_URL every replica of the indexer and search talks to that Qdrant server or cluster.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class StoreSettings(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    data_dir: Path = Field(
        Path(".ragmesh"),
        validation_alias="RAGMESH_DATA_DIR",
        description="Directory of the embedded store (used when QDRANT_URL is unset).",
    )
    qdrant_url: str | None = Field(
        None,
        validation_alias="QDRANT_URL",
        description="Qdrant server or cluster URL (http://host:6333); unset = the embedded store.",
    )
    qdrant_api_key: SecretStr | None = Field(
        None, validation_alias="QDRANT_API_KEY", description="API key of the Qdrant server (server mode only)."
    )
    qdrant_timeout_seconds: float = Field(
        10.0, gt=0, le=600, validation_alias="QDRANT_TIMEOUT_SECONDS", description="Timeout of each Qdrant call."
    )
    collection_prefix: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_-]{0,64}$",
        validation_alias="QDRANT_COLLECTION_PREFIX",
        description="Prepended to every collection name in Qdrant, so several deployments can share a cluster.",
    )
    replication_factor: int | None = Field(
        None,
        ge=1,
        validation_alias="QDRANT_REPLICATION_FACTOR",
        description="Replicas of each shard of new collections (server mode only).",
    )
    shard_number: int | None = Field(
        None,
        ge=1,
        validation_alias="QDRANT_SHARD_NUMBER",
        description="Shards of new collections (server mode only).",
    )
    flush_interval_seconds: float = Field(
        5.0,
        ge=0,
        le=60,
        validation_alias="RAGMESH_STORE_FLUSH_SECONDS",
        description=(
            "Embedded store: how often written segments are flushed to disk (5 s, a Qdrant server's "
            "flush_interval_sec). The WAL already keeps every acknowledged write through a killed process; "
            "0 flushes before each write returns (survives an OS crash too, at 25-50 ms per write). "
            "qdrant-edge holds the GIL while it flushes (60-90 ms of a busy ingest here), so every thread "
            "of the process waits for each flush."
        ),
    )
    hnsw_ef: int | None = Field(
        128,
        ge=1,
        validation_alias="QDRANT_HNSW_EF",
        description=(
            "HNSW ef at search time (higher: better recall, slower). 128 keeps dense recall@10 >= 0.95 "
            "against exact search in bench/bench_store.py (docs/decisions/store-defaults.md)."
        ),
    )
    hnsw_m: int = Field(
        16,
        ge=4,
        le=128,
        validation_alias="RAGMESH_STORE_HNSW_M",
        description="Embedded store: edges per node of the HNSW graph built by optimize (Qdrant's default).",
    )
    hnsw_ef_construct: int = Field(
        100,
        ge=4,
        le=4096,
        validation_alias="RAGMESH_STORE_HNSW_EF_CONSTRUCT",
        description="Embedded store: candidates considered while building the HNSW graph (Qdrant's default).",
    )
    search_threads: int = Field(
        1,
        ge=1,
        le=256,
        validation_alias="RAGMESH_STORE_SEARCH_THREADS",
        description="Embedded store: threads of each collection's search pool, on which one query searches its "
        "segments in parallel. 1 (the default) searches on the calling thread: with 2 CPUs, 1 was faster at "
        "1,000 and at 200,000 chunks, for one query and for many at once (docs/decisions/store-defaults.md); more "
        "can lower one query's latency on a collection of many segments with cores to spare.",
    )
