"""The graph service's Prometheus metrics (served on RAGMESH_GRAPH_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from ragmesh_common.telemetry import LATENCY_BUCKETS


class GraphMetrics:
    """What the graphs were given and asked: entities and relations written or deleted, raw queries refused (by
    reason), and how long walks (explore, get, shortest paths) and raw queries took."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.entities_written = Counter(
            "ragmesh_graph_entities_written", "Entities written (inserted or replaced).", registry=registry
        )
        self.relations_written = Counter(
            "ragmesh_graph_relations_written", "Relations written between entities.", registry=registry
        )
        self.dangling_relations = Counter(
            "ragmesh_graph_dangling_relations",
            "Relations not written because their target is in neither the batch nor the graph.",
            registry=registry,
        )
        self.entities_deleted = Counter(
            "ragmesh_graph_entities_deleted", "Entities deleted, their child entities included.", registry=registry
        )
        self.queries_refused = Counter(
            "ragmesh_graph_queries_refused",
            "Raw Cypher queries refused, by reason (QUERY_NOT_READ_ONLY, QUERY_INVALID, QUERY_TIMEOUT).",
            ["reason"],
            registry=registry,
        )
        self.explore_seconds = Histogram(
            "ragmesh_graph_explore_seconds",
            "Time to walk a graph or its ontology, by operation (entity, get, ontology, paths).",
            ["operation"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
        self.query_seconds = Histogram(
            "ragmesh_graph_query_seconds",
            "Time to run a raw Cypher query that was not refused, by target (data, ontology).",
            ["target"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )
