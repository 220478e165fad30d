"""The search service's Prometheus metrics (served on RAGMESH_SEARCH_METRICS_PORT)."""

from __future__ import annotations

from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge

from .records import Evaluation


class QueryCacheMetrics:
    """How often a query's embedding came from the cache instead of the embedder.

    Hit rate: rate(ragmesh_search_query_cache_hits_total[5m]) / (that + rate(..._misses_total[5m]))."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.hits = Counter(
            "ragmesh_search_query_cache_hits", "Query embeddings served from the cache.", registry=registry
        )
        self.misses = Counter(
            "ragmesh_search_query_cache_misses",
            "Query embeddings not in the cache (asked of the embedder).",
            registry=registry,
        )
        self.entries = Gauge(
            "ragmesh_search_query_cache_entries", "Query embeddings held in the cache now.", registry=registry
        )


class QualityMetrics:
    """Each collection's latest golden-set scores, by search mode (set by EvaluateCollection, and at start-up
    from the stored history), so a dashboard shows retrieval quality next to latency.

    ragmesh_collection_quality{collection, mode, metric}: metric is ndcg_at_10, recall_at_10 or mrr_at_10 (0..1);
    ragmesh_collection_quality_queries{collection, mode}: the golden queries it was measured on;
    ragmesh_collection_quality_timestamp_seconds{collection, mode}: when (Unix time)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.quality = Gauge(
            "ragmesh_collection_quality",
            "The latest golden-set score of a collection's index.",
            ["collection", "mode", "metric"],
            registry=registry,
        )
        self.queries = Gauge(
            "ragmesh_collection_quality_queries",
            "Golden queries the latest score of a collection was measured on.",
            ["collection", "mode"],
            registry=registry,
        )
        self.timestamp = Gauge(
            "ragmesh_collection_quality_timestamp_seconds",
            "When a collection's latest golden-set score was measured (Unix time).",
            ["collection", "mode"],
            registry=registry,
        )

    def record(self, evaluation: Evaluation) -> None:
        for metric, value in evaluation.metrics.items():
            self.quality.labels(evaluation.collection, evaluation.mode, metric).set(value)
        self.queries.labels(evaluation.collection, evaluation.mode).set(evaluation.queries)
        self.timestamp.labels(evaluation.collection, evaluation.mode).set(
            datetime.fromisoformat(evaluation.evaluated_at).timestamp()
        )
