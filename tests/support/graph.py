"""Builders of graph entities for tests (services/graph/tests and the slices that write or read graphs): protobuf
values, entities "<Type>/<key values>", and a small Kubernetes-like cluster of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import struct_pb2
from ragmesh.graph.v1 import graph_service_pb2 as pb


def value(v: Any) -> struct_pb2.Value:
    """A plain value as a google.protobuf.Value."""
    out = struct_pb2.Value()
    if v is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, int | float):
        out.number_value = v
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, dict):
        out.struct_value.update(v)
    else:
        out.list_value.values.extend(value(x) for x in v)
    return out


def entity(
    entity_id: str,
    *,
    key: Sequence[str] = ("namespace", "name"),
    props: dict[str, Any] | None = None,
    rels: Sequence[tuple[str, str] | tuple[str, str, int]] = (),
    parent: str = "",
    labels: Sequence[str] = (),
) -> pb.Entity:
    """An entity "<Type>/<key values...>": its primary key named by `key` (values from the id), `props`,
    relations (TYPE, target id[, index]) and parent."""
    entity_type, *values = entity_id.split("/")
    primary = [pb.Property(name=n, value=value(v)) for n, v in zip(key, values, strict=False)] if key else []
    return pb.Entity(
        id=entity_id,
        type=entity_type,
        primary_key=primary,
        properties=[pb.Property(name=n, value=value(v)) for n, v in (props or {}).items()],
        relations=[
            pb.Relation(type=r[0], target_id=r[1], index=r[2] if len(r) > 2 else None)  # type: ignore[misc]
            for r in rels
        ],
        parent_id=parent,
        labels=list(labels),
    )


def props_of(message: pb.Entity) -> dict[str, Any]:
    """An entity's primary key and properties as plain values."""
    from google.protobuf.json_format import MessageToDict

    return {p.name: MessageToDict(p.value) for p in (*message.primary_key, *message.properties)}


# A small cluster: a Service selects a Deployment that uses a ServiceAccount and a ConfigMap and has a
# Container; an Ingress references the Service; a RoleBinding applies to the ServiceAccount.
def cluster() -> list[pb.Entity]:
    return [
        entity("Ingress/shop/web", rels=[("REFERENCES", "Service/shop/web")]),
        entity("Service/shop/web", props={"spec.type": "ClusterIP"}, rels=[("SELECTS", "Deployment/shop/web")]),
        entity(
            "Deployment/shop/web",
            props={"spec.replicas": 3, "metadata.labels": ["app=web", "tier=front"]},
            rels=[
                ("USES", "ServiceAccount/shop/runner"),
                ("USES", "ConfigMap/shop/settings"),
                ("HAS", "Container/shop/web/app", 0),
            ],
        ),
        entity(
            "Container/shop/web/app",
            key=("namespace", "deployment", "name"),
            props={"image": "nginx:1.27"},
            parent="Deployment/shop/web",
        ),
        entity("ServiceAccount/shop/runner"),
        entity("ConfigMap/shop/settings", props={"data.mode": "fast"}),
        entity("RoleBinding/shop/runner-read", rels=[("APPLIES_TO", "ServiceAccount/shop/runner")]),
    ]


class GraphClient:
    """The stub, where it listens, and the settings it runs with."""

    def __init__(self, stub: Any, addr: str, settings: Any) -> None:
        self.stub = stub
        self.addr = addr
        self.settings = settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stub, name)

    async def upsert(self, entities: Sequence[pb.Entity], collection: str = "k8s") -> pb.UpsertEntitiesResponse:
        return await self.stub.UpsertEntities(pb.UpsertEntitiesRequest(collection=collection, entities=entities))

    async def get(self, entity_id: str, collection: str = "k8s") -> pb.Entity:
        reply = await self.stub.GetEntity(pb.GetEntityRequest(collection=collection, entity_id=entity_id))
        return reply.entity

    async def info(self, collection: str = "k8s") -> pb.GraphInfo:
        reply = await self.stub.ListEntityTypes(pb.ListEntityTypesRequest(collection=collection))
        return reply.graphs[0]

    async def query(self, statement: str, **fields: Any) -> pb.QueryResponse:
        collection = fields.pop("collection", "k8s")
        return await self.stub.Query(pb.QueryRequest(collection=collection, query=statement, **fields))
