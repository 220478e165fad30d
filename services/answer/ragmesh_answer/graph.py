"""The graph hop of an answer: the sources that are graph entities get their neighbourhood, one hop out.

A document the indexer wrote for a graph entity (IngestEntities: dual storage) carries the metadata
is_graph_entity=true and has the entity's id as its doc_id. For the first few such sources of a context
(best first), GraphService.ExploreEntity (depth 1) is called, all at once under one deadline, and the
relations are added below the source's chunks (`context.relations_line`), so the model, and the extractive
answer, can cite them with the source's number.

The graph is an extra, never a requirement: a graph that is down, late, or does not know the entity leaves the
source as it was, with a warning in the log and `ragmesh_answer_graph_lookups{outcome="failed"}` counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Tracer
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError
from ragmesh_common.telemetry import Attr

from . import context as ctx
from .metrics import AnswerMetrics

log = logging.getLogger(__name__)

GRAPH_ENTITY_KEY = "is_graph_entity"


def entity_id(doc_id: str, metadata: Mapping[str, Any]) -> str:
    """The graph entity a search result's document stands for (its doc_id), or "" when it is not one."""
    flag = metadata.get(GRAPH_ENTITY_KEY)
    return doc_id if flag is True or (isinstance(flag, str) and flag.lower() == "true") else ""


class Neighbourhoods:
    """Adds graph neighbourhoods to a context's entity sources (see the module docstring)."""

    def __init__(
        self, graph: ServiceClient, metrics: AnswerMetrics, *, entities: int, neighbours: int, tracer: Tracer | None
    ) -> None:
        self.graph = graph
        self.metrics = metrics
        self.entities = entities
        self.neighbours = neighbours
        self.tracer = tracer or trace.NoOpTracer()

    async def add(self, context: ctx.Context) -> None:
        """Set `relations` on the first `entities` sources that are graph entities; never raises for the graph."""
        sources = [s for s in context.sources if s.entity_id][: self.entities]
        if not sources:
            return
        with self.tracer.start_as_current_span("answer.graph_neighbourhoods") as span:
            lines = await asyncio.gather(*(self._explore(s) for s in sources))
            for source, line in zip(sources, lines, strict=True):
                source.relations = line or ""
            found = sum(1 for line in lines if line is not None)
            span.set_attributes(
                {
                    Attr.QUERY_COUNT: len(sources),
                    Attr.RESULT_COUNT: found,
                    Attr.STATUS: "ok" if found == len(sources) else "degraded",
                }
            )

    async def _explore(self, source: ctx.SourceDoc) -> str | None:
        """The source's relations line ("" when it has none), or None when the graph could not say."""
        request = graph_pb.ExploreEntityRequest(
            collection=source.collection, entity_id=source.entity_id, depth=1, limit=self.neighbours
        )
        try:
            reply = await self.graph.call("ExploreEntity", request)
        except RagmeshError as exc:
            self.metrics.graph_lookups.labels("failed").inc()
            log.warning("no graph neighbourhood for %s in %s: %s", source.entity_id, source.collection, exc)
            return None
        self.metrics.graph_lookups.labels("added").inc()
        relations = [
            (n.relation, n.direction != graph_pb.DIRECTION_INCOMING, n.id) for n in reply.neighbours if n.depth == 1
        ]
        return ctx.relations_line(reply.entity.id or source.entity_id, relations)
