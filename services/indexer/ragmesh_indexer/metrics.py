"""The indexer's Prometheus metrics (served on RAGMESH_INDEXER_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class IngestMetrics:
    """What ingestion did: documents by outcome and chunks written; re-indexes and the documents they copied."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.documents = Counter(
            "ragmesh_indexer_documents",
            "Documents ingested, by status (indexed, unchanged, failed).",
            ["status"],
            registry=registry,
        )
        self.chunks = Counter("ragmesh_indexer_chunks", "Chunks embedded and written to the store.", registry=registry)
        self.reindexes = Counter(
            "ragmesh_indexer_reindexes",
            "Re-index jobs ended, by decision (switched, forced, no_golden_set, rejected, cancelled).",
            ["decision"],
            registry=registry,
        )
        self.reindexed = Counter(
            "ragmesh_indexer_reindexed_documents",
            "Documents a re-index copied into a new version, by status (indexed, unchanged, failed).",
            ["status"],
            registry=registry,
        )
