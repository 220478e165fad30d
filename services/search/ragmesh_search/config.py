"""Search settings: environment only (RAGMESH_SEARCH_*), validated at start-up.

The store is configured separately (`ragmesh_store.StoreSettings`), shared with the indexer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings


class SearchSettings(ServiceSettings):
    """Settings of the search service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_SEARCH_", extra="ignore", frozen=True, populate_by_name=True)

    port: int = config.port_field("search")
    metrics_port: int = config.metrics_port_field("search")
    embedder_addr: str = config.addr_field("embedder")
    prefetch_limit: int = Field(
        100,
        ge=1,
        le=10_000,
        description=("Hybrid search: candidates taken from each of the dense and sparse searches before fusion."),
    )
    rrf_k: int = Field(60, ge=1, le=10_000, description="The k of reciprocal rank fusion.")
    default_fusion: Literal["adaptive", "relative_score", "rrf", "dbsf"] = Field(
        "adaptive",
        description=(
            "How hybrid search fuses dense and sparse candidates when neither the request nor the collection says: "
            "adaptive (per-query weights from each list's best match on its theoretical scale, with dense "
            "pseudo-relevance feedback), relative_score (min-max normalised scores, weighted by dense_weight), rrf "
            "(reciprocal rank fusion) or dbsf (distribution-based score fusion)."
        ),
    )
    dense_weight: float = Field(
        0.75,
        ge=0,
        le=1,
        description=("Relative score fusion: the weight of the dense scores (the sparse ones get 1 - dense_weight)."),
    )
    prf_docs: int = Field(
        3,
        ge=0,
        le=10,
        description=(
            "Adaptive fusion: how many top fused chunks feed the dense query back (Rocchio pseudo-relevance feedback, "
            "one more store query); 0 turns feedback off."
        ),
    )
    prf_weight: float = Field(
        0.2,
        ge=0,
        le=1,
        description=(
            "Adaptive fusion: the weight of the feedback chunks' mean vector added to the (unit) query vector."
        ),
    )
    max_query_chars: int = Field(2000, ge=1, le=100_000, description="Longest query accepted.")
    default_mode: Literal["hybrid", "dense", "sparse", "semantic", "keyword"] = Field(
        "hybrid", description=("The mode used when a request does not name one.")
    )
    rerank_url: str = Field(
        "",
        description=(
            "A /rerank HTTP endpoint (Cohere, Infinity, Jina, vLLM or text-embeddings-inference), e.g. "
            "http://reranker:7997/rerank; empty (the default) turns the rerank stage off."
        ),
    )
    rerank_api: Literal["cohere", "tei"] = Field(
        "cohere",
        description=(
            "The request shape of the rerank endpoint: cohere (documents, top_n; Cohere, Infinity, Jina, vLLM) or tei "
            "(texts; text-embeddings-inference)."
        ),
    )
    rerank_model: str = Field("", description="The model name sent to the rerank endpoint (if it needs one).")
    rerank_api_key: SecretStr | None = Field(None, description="Bearer token for the rerank endpoint, if any.")
    rerank_top_n: int = Field(
        50,
        ge=1,
        le=1000,
        description=(
            "How many of the best fused candidates the reranker re-orders (the results are then cut to top_k)."
        ),
    )
    rerank_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of one rerank call.")
    embed_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of the Embed call for a query.")
    query_cache_size: int = Field(
        1024,
        ge=0,
        le=1_000_000,
        description=(
            "Query embeddings kept in an LRU cache (by query text, vector kinds and model), so a repeated query "
            "skips the embedder; 0 turns the cache off. Hits and misses are exported as metrics."
        ),
    )
    embedder_wait_seconds: float = config.embedder_wait_field()
