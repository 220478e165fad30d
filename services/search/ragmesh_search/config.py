"""Search settings: environment only (RAGMESH_SEARCH_*), validated at start-up.

The store is configured separately (`ragmesh_store.StoreSettings`), shared with the indexer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings


class SearchSettings(ServiceSettings):
    """Settings of the search service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_SEARCH_", extra="ignore", frozen=True,
                                      populate_by_name=True)

    port: int = Field(config.DEFAULT_PORTS["search"], ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    embedder_addr: str = Field(config.default_addr("embedder"), validation_alias="RAGMESH_EMBEDDER_ADDR",
                               description="Where the embedder service listens (host:port).")
    prefetch_limit: int = Field(50, ge=1, le=10_000, description=(
        "Hybrid search: candidates taken from each of the dense and sparse searches before fusion."))
    rrf_k: int = Field(60, ge=1, le=10_000, description="The k of reciprocal rank fusion.")
    max_query_chars: int = Field(2000, ge=1, le=100_000, description="Longest query accepted.")
    default_mode: Literal["hybrid", "dense", "sparse"] = Field("hybrid", description=(
        "The mode used when a request does not name one."))
    embed_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of the Embed call for a query.")
    embedder_wait_seconds: float = Field(60.0, ge=0, description=(
        "At start-up without a given store, how long to wait for the embedder to report its dimension."))
