"""The indexer's Prometheus metrics (served on RAGMESH_INDEXER_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class IngestMetrics:
    """What ingestion did: documents by outcome and chunks written; re-indexes and the documents they copied;
    graph entities written to both stores, undone, and still to undo."""

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
        self.graph_entities = Counter(
            "ragmesh_indexer_graph_entities",
            "Graph entities written to both stores (the graph service and the vector store).",
            registry=registry,
        )
        self.graph_undone = Counter(
            "ragmesh_indexer_graph_undone_entities",
            "Graph entities of failed batches deleted from both stores again (no entity stays in one store only).",
            registry=registry,
        )
        self.graph_pending = Gauge(
            "ragmesh_indexer_graph_pending_entities",
            "Graph entities of failed batches still to delete from both stores, waiting for the graph service.",
            registry=registry,
        )
