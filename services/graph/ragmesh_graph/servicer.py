"""gRPC GraphService: requests to the domain (`service.Graphs`) and its records back to protos; the one place
where graph messages and plain values meet."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict
from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as pb_grpc
from ragmesh_common.validation import whole_number

from . import service as svc
from .errors import DOMAIN
from .store import Direction, Entity, EntityType, GraphInfo, Relation, Target, TypeRelation, Value

__all__ = ["DOMAIN", "GraphServicer"]

_DIRECTIONS = {Direction.OUTGOING: pb.DIRECTION_OUTGOING, Direction.INCOMING: pb.DIRECTION_INCOMING}
_TARGETS = {
    pb.QUERY_TARGET_UNSPECIFIED: Target.DATA,
    pb.QUERY_TARGET_DATA: Target.DATA,
    pb.QUERY_TARGET_ONTOLOGY: Target.ONTOLOGY,
}


# --- to plain values ------------------------------------------------------------------------------------------
def plain_value(value: struct_pb2.Value) -> Any:
    """A Value as Python: whole numbers as ints, lists as lists, objects as dicts (refused as properties)."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return whole_number(value.number_value)
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [plain_value(v) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: plain_value(v) for k, v in value.struct_value.fields.items()}
    return None


def _properties(properties: Sequence[pb.Property]) -> list[tuple[str, Any]]:
    """(name, value) of each property that has a value (null ones are not given)."""
    out = []
    for p in properties:
        value = plain_value(p.value)
        if value is not None:
            out.append((p.name, value))
    return out


def entity_from(message: pb.Entity) -> Entity:
    return Entity(
        id=message.id,
        type=message.type,
        primary_key=_properties(message.primary_key),
        properties=dict(_properties(message.properties)),
        labels=list(message.labels),
        alternative_keys=list(message.alternative_keys),
        relations=[
            Relation(r.type, r.target_id, r.target_type, index=r.index if r.HasField("index") else None)
            for r in message.relations
        ],
        parent_id=message.parent_id,
    )


# --- to messages ---------------------------------------------------------------------------------------------
def proto_value(value: Any) -> struct_pb2.Value:
    """A JSON-able Python value as a Value."""
    if value is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            return struct_pb2.Value(string_value=str(value))
        return struct_pb2.Value(number_value=number)
    if isinstance(value, str):
        return struct_pb2.Value(string_value=value)
    if isinstance(value, dict):
        return struct_pb2.Value(struct_value=struct_pb2.Struct(fields={k: proto_value(v) for k, v in value.items()}))
    if isinstance(value, list | tuple):
        return struct_pb2.Value(list_value=struct_pb2.ListValue(values=[proto_value(v) for v in value]))
    return struct_pb2.Value(string_value=str(value))


def _property(name: str, value: Value) -> pb.Property:
    return pb.Property(name=name, value=proto_value(value))


def entity_message(entity: Entity) -> pb.Entity:
    return pb.Entity(
        id=entity.id,
        type=entity.type,
        primary_key=[_property(n, v) for n, v in entity.primary_key],
        properties=[_property(n, v) for n, v in sorted(entity.properties.items())],
        labels=list(entity.labels),
        alternative_keys=list(entity.alternative_keys),
        relations=[
            pb.Relation(
                type=r.type,
                target_id=r.target_id,
                target_type=r.target_type,
                direction=_DIRECTIONS[r.direction],
                index=r.index,
            )
            for r in entity.relations
        ],
        parent_id=entity.parent_id,
    )


def type_message(t: EntityType) -> pb.EntityType:
    return pb.EntityType(name=t.name, count=t.count, properties=t.properties, primary_key=t.primary_key)


def type_relation_message(r: TypeRelation) -> pb.TypeRelation:
    return pb.TypeRelation(from_type=r.from_type, type=r.type, to_type=r.to_type, count=r.count, depth=r.depth)


def graph_message(info: GraphInfo) -> pb.GraphInfo:
    return pb.GraphInfo(
        collection=info.collection,
        entity_types=[type_message(t) for t in info.entity_types],
        relations=[type_relation_message(r) for r in info.relations],
        entities=info.entities,
    )


class GraphServicer(pb_grpc.GraphServiceServicer):
    def __init__(self, graphs: svc.Graphs) -> None:
        self.graphs = graphs

    async def UpsertEntities(self, request: pb.UpsertEntitiesRequest, context: object) -> pb.UpsertEntitiesResponse:
        result = await self.graphs.upsert(request.collection, [entity_from(e) for e in request.entities])
        return pb.UpsertEntitiesResponse(
            entities=result.entities, relations=result.relations, dangling_relations=result.dangling
        )

    async def DeleteEntities(self, request: pb.DeleteEntitiesRequest, context: object) -> pb.DeleteEntitiesResponse:
        return pb.DeleteEntitiesResponse(deleted_ids=await self.graphs.delete(request.collection, list(request.ids)))

    async def DeleteGraph(self, request: pb.DeleteGraphRequest, context: object) -> pb.DeleteGraphResponse:
        return pb.DeleteGraphResponse(deleted=await self.graphs.drop(request.collection))

    async def ListEntityTypes(self, request: pb.ListEntityTypesRequest, context: object) -> pb.ListEntityTypesResponse:
        graphs = await self.graphs.list_graphs(request.collection)
        return pb.ListEntityTypesResponse(graphs=[graph_message(g) for g in graphs])

    async def ExploreOntology(self, request: pb.ExploreOntologyRequest, context: object) -> pb.ExploreOntologyResponse:
        found = await self.graphs.explore_ontology(request.collection, request.entity_type, request.depth)
        return pb.ExploreOntologyResponse(
            entity_type=type_message(found.entity_type),
            relations=[type_relation_message(r) for r in found.relations],
        )

    async def ExploreEntity(self, request: pb.ExploreEntityRequest, context: object) -> pb.ExploreEntityResponse:
        found = await self.graphs.explore(request.collection, request.entity_id, request.depth, request.limit)
        entity = entity_message(found.entity)
        del entity.relations[:]  # the neighbours at depth 1 are its relations
        return pb.ExploreEntityResponse(
            entity=entity,
            neighbours=[
                pb.Neighbour(
                    id=n.id,
                    type=n.type,
                    relation=n.relation,
                    direction=_DIRECTIONS[n.direction],
                    depth=n.depth,
                    via_id=n.via_id,
                )
                for n in found.neighbours
            ],
            truncated=found.truncated,
        )

    async def GetEntity(self, request: pb.GetEntityRequest, context: object) -> pb.GetEntityResponse:
        return pb.GetEntityResponse(entity=entity_message(await self.graphs.get(request.collection, request.entity_id)))

    async def ShortestPaths(self, request: pb.ShortestPathsRequest, context: object) -> pb.ShortestPathsResponse:
        paths = await self.graphs.shortest_paths(
            request.collection, request.from_type, request.to_type, request.max_depth
        )
        return pb.ShortestPathsResponse(
            paths=[pb.TypePath(cypher=p.cypher, hops=[type_relation_message(hop) for hop, _ in p.hops]) for p in paths]
        )

    async def Query(self, request: pb.QueryRequest, context: object) -> pb.QueryResponse:
        parameters = MessageToDict(request.parameters) if request.HasField("parameters") else {}
        rows = await self.graphs.query(
            request.collection, request.query, _TARGETS.get(request.target, Target.DATA), parameters, request.row_limit
        )
        return pb.QueryResponse(
            columns=rows.columns,
            rows=[struct_pb2.ListValue(values=[proto_value(v) for v in row]) for row in rows.rows],
            truncated=rows.truncated,
        )
