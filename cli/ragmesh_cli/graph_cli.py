"""`ragmesh graph`: a collection's entity graph from the terminal. `ingest` sends files to the indexer
(IngestEntities: nodes in the graph and searchable documents); the other commands read the graph service over
gRPC (RAGMESH_GRAPH_ADDR). Tables for people go to stdout (they fit 80 columns); `--json` prints the answer as
JSON instead, for scripts. Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as pb_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as idx_grpc
from ragmesh_common.clients import ServiceClient
from rich.table import Table

from .console import err, out

# Ingesting files converts, embeds and stores every entity: the ingest deadline.
INGEST_TIMEOUT_SECONDS = 600.0
ARROWS: dict[int, tuple[str, str]] = {pb.DIRECTION_OUTGOING: ("-[", "]->"), pb.DIRECTION_INCOMING: ("<-[", "]-")}


async def call(service: str, addr: str, method: str, request: Message, *, timeout: float = 60) -> Any:
    """One call to the graph service (or the indexer) on a client of its own."""
    stub = pb_grpc.GraphServiceStub if service == "graph" else idx_grpc.IndexerServiceStub
    client = ServiceClient(service, addr, stub, timeout=timeout)
    try:
        return await client.call(method, request)
    finally:
        await client.close()


def _json(message: Message) -> None:
    out.print_json(json.dumps(MessageToDict(message, preserving_proto_field_name=True)))


def plain(value: Any) -> Any:
    """A JSON value from a protobuf Value, whole numbers as ints (a Value carries every number as a double)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def _cell(value: Any) -> str:
    value = plain(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def arrow(relation: str, direction: int) -> str:
    """A relation as Cypher draws it from the entity it is seen from: -[SELECTS]-> or <-[SELECTS]-."""
    left, right = ARROWS.get(direction, ("-[", "]-"))
    return f"{left}{relation}{right}"


async def ingest(files: Sequence[Path], collection: str, indexer_addr: str, *, as_json: bool) -> int:
    """`ragmesh graph ingest`: the files' bytes to IngestEntities; counts per entity and relation type."""
    inputs = []
    for path in files:
        data = await asyncio.to_thread(path.read_bytes)
        inputs.append(idx_pb.FileInput(data=data, filename=path.name))
    request = idx_pb.IngestEntitiesRequest(collection=collection, files=inputs)
    reply = await call("indexer", indexer_addr, "IngestEntities", request, timeout=INGEST_TIMEOUT_SECONDS)
    if as_json:
        _json(reply)
        return 0
    table = Table("", "type", "count", title=f"{collection}: {reply.entities} entities, {reply.relations} relations")
    for name, count in sorted(reply.entity_types.items()):
        table.add_row("entity", name, str(count))
    for name, count in sorted(reply.relation_types.items()):
        table.add_row("relation", name, str(count))
    out.print(table)
    if reply.dangling_relations:
        err.print(
            f"{len(reply.dangling_relations)} relation(s) point at entities that are not stored, e.g. "
            f"{reply.dangling_relations[0]}",
            style="yellow",
            soft_wrap=True,
        )
    if reply.omitted_properties:
        err.print(f"{len(reply.omitted_properties)} long propert(ies) kept out of the graph (in the text only)")
    return 0


async def types(collection: str, graph_addr: str, *, as_json: bool) -> int:
    """`ragmesh graph types`: each graph's entity types and relation types (every collection's, or one)."""
    reply = await call("graph", graph_addr, "ListEntityTypes", pb.ListEntityTypesRequest(collection=collection))
    if as_json:
        _json(reply)
        return 0
    if not reply.graphs:
        err.print("no collection has a graph yet: ragmesh graph ingest FILE -c COLLECTION")
    for graph in reply.graphs:
        table = Table("entity type", "count", "primary key", title=f"{graph.collection}: {graph.entities} entities")
        for t in graph.entity_types:
            table.add_row(t.name, str(t.count), ", ".join(t.primary_key))
        out.print(table)
        relations = Table("from", "relation", "to", "count")
        for r in graph.relations:
            relations.add_row(r.from_type, r.type, r.to_type, str(r.count))
        out.print(relations)
    return 0


async def explore(collection: str, entity_id: str, depth: int, graph_addr: str, *, as_json: bool) -> int:
    """`ragmesh graph explore`: an entity's neighbours within `depth` hops, nearest first."""
    request = pb.ExploreEntityRequest(collection=collection, entity_id=entity_id, depth=depth)
    reply = await call("graph", graph_addr, "ExploreEntity", request)
    if as_json:
        _json(reply)
        return 0
    table = Table("depth", "from", "relation", "neighbour", title=f"{reply.entity.id} ({reply.entity.type})")
    for n in reply.neighbours:
        via = "" if n.via_id == reply.entity.id else n.via_id
        table.add_row(str(n.depth), via, arrow(n.relation, n.direction), n.id)
    out.print(table)
    if reply.truncated:
        err.print(f"only the first {len(reply.neighbours)} neighbours", style="yellow")
    return 0


async def entity(collection: str, entity_id: str, graph_addr: str, *, as_json: bool) -> int:
    """`ragmesh graph entity`: every property and relation of an entity."""
    reply = await call(
        "graph", graph_addr, "GetEntity", pb.GetEntityRequest(collection=collection, entity_id=entity_id)
    )
    if as_json:
        _json(reply)
        return 0
    e = reply.entity
    table = Table("property", "value", title=f"{e.id} ({e.type})")
    for p in (*e.primary_key, *e.properties):
        table.add_row(p.name, _cell(MessageToDict(p.value)))
    if e.parent_id:
        table.add_row("(parent)", e.parent_id)
    out.print(table)
    relations = Table("relation", "entity")
    for r in e.relations:
        relations.add_row(arrow(r.type, r.direction), r.target_id)
    out.print(relations)
    return 0


async def paths(
    collection: str, from_type: str, to_type: str, max_depth: int, graph_addr: str, *, as_json: bool
) -> int:
    """`ragmesh graph paths`: the shortest relation paths between two entity types, in Cypher notation."""
    request = pb.ShortestPathsRequest(collection=collection, from_type=from_type, to_type=to_type, max_depth=max_depth)
    reply = await call("graph", graph_addr, "ShortestPaths", request)
    if as_json:
        _json(reply)
        return 0
    if not reply.paths:
        err.print(f"{from_type} and {to_type} are not connected within {max_depth} hops")
        return 1
    for path in reply.paths:
        out.print(path.cypher, soft_wrap=True)
    return 0


async def query(
    collection: str, statement: str, graph_addr: str, *, ontology: bool, row_limit: int, as_json: bool
) -> int:
    """`ragmesh graph query`: one read-only Cypher statement; the rows as a table."""
    target = pb.QUERY_TARGET_ONTOLOGY if ontology else pb.QUERY_TARGET_DATA
    request = pb.QueryRequest(collection=collection, query=statement, target=target, row_limit=row_limit)
    reply = await call("graph", graph_addr, "Query", request)
    if as_json:
        _json(reply)
        return 0
    table = Table(*reply.columns)
    for row in reply.rows:
        table.add_row(*(_cell(v) for v in MessageToDict(row)))
    out.print(table)
    if reply.truncated:
        err.print(f"only the first {len(reply.rows)} rows (--row-limit)", style="yellow")
    return 0
