"""IngestEntities and DeleteEntities over real gRPC with the real graph service (LadybugDB) and the real store:
each entity in both stores (a graph node, and a document search finds with the is_graph_entity and
graph_entity_type filters), re-ingest idempotent, delete from both, a store failure undone in the graph, every
refusal, and the feature off."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.reasons import Reason

pytestmark = pytest.mark.asyncio(loop_scope="session")
K8S = Path(__file__).resolve().parents[3] / "deploy" / "k8s"

SHOP = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: frontend, namespace: shop, labels: {app: frontend}}
spec:
  replicas: REPLICAS
  template:
    metadata: {labels: {app: frontend}}
    spec:
      serviceAccountName: web
      containers:
        - name: app
          image: frontend:1
          env: [{name: CART, value: "http://cart:8080"}]
        - {name: sidecar, image: proxy:1}
---
apiVersion: v1
kind: Service
metadata: {name: frontend, namespace: shop}
spec: {selector: {app: frontend}}
---
apiVersion: v1
kind: Service
metadata: {name: cart, namespace: shop}
spec: {selector: {app: cart}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: web, namespace: shop}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: shop}
stringData: {token: do-not-store-me}
"""


def shop(replicas: int = 2, *, sidecar: bool = True) -> pb.FileInput:
    text = SHOP.replace("REPLICAS", str(replicas))
    if not sidecar:
        text = text.replace("        - {name: sidecar, image: proxy:1}\n", "")
    return pb.FileInput(data=text.encode(), filename="shop.yaml")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    # small batches: a request of a few entities already takes several graph writes
    return await mesh_factory(graph=True, indexer={"graph_batch_entities": 3})


@pytest.fixture
def indexer(mesh):
    return mesh.stub("indexer")


@pytest.fixture
def graph(mesh):
    return mesh.stub("graph")


async def graph_ids(graph, collection: str) -> set[str]:
    try:
        reply = await graph.Query(
            graph_pb.QueryRequest(collection=collection, query="MATCH (n) RETURN n.id", row_limit=10_000)
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:  # no graph yet
            return set()
        raise
    return {row.values[0].string_value for row in reply.rows}


def store_ids(mesh, collection: str) -> set[str]:
    try:
        return {row["doc_id"] for row in mesh.store.list_documents(collection, {}, ["doc_id"])}
    except Exception:  # noqa: BLE001 - no collection yet
        return set()


async def search_ids(mesh, collection: str, query: str, **filters) -> list[str]:
    struct = struct_pb2.Struct()
    struct.update(filters)
    reply = await mesh.stub("search").Search(
        search_pb.SearchRequest(query=query, collections=[collection], top_k=50, filters=struct, group_by_document=True)
    )
    return [r.doc_id for r in reply.results]


async def test_a_manifest_lands_in_both_stores_with_its_relations(mesh, indexer, graph):
    reply = await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="k8s", files=[shop()]))
    ids = set(reply.entity_ids)
    assert {"Deployment/shop/frontend", "Container/shop/frontend/app", "Secret/shop/token"} <= ids
    assert reply.entities == len(ids) == len(reply.entity_ids)
    assert reply.entity_types["Container"] == 2 and reply.entity_types["Service"] == 2
    assert reply.relation_types["SELECTS"] == 1 and reply.relation_types["REFERENCES"] == 1
    assert reply.dangling_relations == []  # the Service (batch 1) selects the Deployment: written once it is in
    assert await graph_ids(graph, "k8s") == ids == store_ids(mesh, "k8s")

    service = (
        await graph.GetEntity(graph_pb.GetEntityRequest(collection="k8s", entity_id="Service/shop/frontend"))
    ).entity
    assert ("SELECTS", "Deployment/shop/frontend") in {(r.type, r.target_id) for r in service.relations}
    app = (
        await graph.GetEntity(graph_pb.GetEntityRequest(collection="k8s", entity_id="Container/shop/frontend/app"))
    ).entity
    assert app.parent_id == "Deployment/shop/frontend"
    assert ("REFERENCES", "Service/shop/cart") in {(r.type, r.target_id) for r in app.relations}

    # search finds the entities by their text, and the metadata filters pick graph entities and their type
    assert await search_ids(mesh, "k8s", "frontend deployment", graph_entity_type="Deployment") == [
        "Deployment/shop/frontend"
    ]
    containers = await search_ids(mesh, "k8s", "container image", graph_entity_type="Container")
    assert set(containers) == {"Container/shop/frontend/app", "Container/shop/frontend/sidecar"}
    assert set(await search_ids(mesh, "k8s", "shop", is_graph_entity=True)) == ids
    # a Secret's values are in neither store
    secret = (await graph.GetEntity(graph_pb.GetEntityRequest(collection="k8s", entity_id="Secret/shop/token"))).entity
    assert "do-not-store-me" not in str(secret)
    texts = mesh.store.list_documents("k8s", {"doc_id": "Secret/shop/token"}, ["text"])
    assert texts and "do-not-store-me" not in json.dumps(texts) and "token" in texts[0]["text"]


async def test_ingesting_again_replaces_in_both_stores(mesh, indexer, graph):
    first = await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="again", files=[shop(2)]))
    second = await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="again", files=[shop(2)]))
    assert second.entity_ids == first.entity_ids
    assert await graph_ids(graph, "again") == set(first.entity_ids) == store_ids(mesh, "again")

    await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="again", files=[shop(5)]))
    deployment = (
        await graph.GetEntity(graph_pb.GetEntityRequest(collection="again", entity_id="Deployment/shop/frontend"))
    ).entity
    assert {p.name: p.value.number_value for p in deployment.properties}["spec.replicas"] == 5
    [doc] = mesh.store.list_documents("again", {"doc_id": "Deployment/shop/frontend"}, ["text"])
    assert "spec.replicas: 5" in doc["text"]
    assert await graph_ids(graph, "again") == set(first.entity_ids) == store_ids(mesh, "again")


async def test_a_child_the_entity_no_longer_has_is_gone_from_both_stores_after_a_reingest(mesh, indexer, graph):
    await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="stale", files=[shop()]))
    assert "Container/shop/frontend/sidecar" in await graph_ids(graph, "stale")
    reply = await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="stale", files=[shop(sidecar=False)]))
    assert "Container/shop/frontend/sidecar" not in reply.entity_ids
    assert await graph_ids(graph, "stale") == set(reply.entity_ids) == store_ids(mesh, "stale")


async def test_delete_removes_an_entity_and_its_children_from_both_stores(mesh, indexer, graph, rpc_error):
    await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="gone", files=[shop()]))
    reply = await indexer.DeleteEntities(pb.DeleteEntitiesRequest(collection="gone", ids=["Deployment/shop/frontend"]))
    removed = {"Deployment/shop/frontend", "Container/shop/frontend/app", "Container/shop/frontend/sidecar"}
    assert removed <= set(reply.deleted_ids)
    assert not removed & await graph_ids(graph, "gone")
    assert not removed & store_ids(mesh, "gone")
    assert await graph_ids(graph, "gone") == store_ids(mesh, "gone") != set()
    error = await rpc_error(
        graph.GetEntity(graph_pb.GetEntityRequest(collection="gone", entity_id="Deployment/shop/frontend"))
    )
    assert error.reason == Reason.ENTITY_NOT_FOUND
    # deleting what is gone deletes nothing
    again = await indexer.DeleteEntities(pb.DeleteEntitiesRequest(collection="gone", ids=["Deployment/shop/frontend"]))
    assert list(again.deleted_ids) == []


async def test_entities_given_directly_with_children_long_properties_and_dangling_relations(mesh, indexer, graph):
    properties = struct_pb2.Struct()
    properties.update({"shop": "north", "number": 7, "note": "x" * 300, "lines": [{"name": "pen"}, {"name": "ink"}]})
    entity = pb.EntityInput(
        type="Order",
        primary_key=["shop", "number"],
        properties=properties,
        labels=["sales"],
        relations=[pb.EntityRelation(type="PLACED_BY", target_id="Customer/9")],
    )
    reply = await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="orders", entities=[entity]))
    assert list(reply.entity_ids) == ["Order/north/7", "OrderLine/north/7/pen", "OrderLine/north/7/ink"]
    assert list(reply.omitted_properties) == ["Order/north/7#note"]
    assert list(reply.dangling_relations) == ["Order/north/7 -[PLACED_BY]-> Customer/9"]
    assert reply.relation_types["HAS"] == 2 and "PLACED_BY" not in reply.relation_types
    order = (await graph.GetEntity(graph_pb.GetEntityRequest(collection="orders", entity_id="Order/north/7"))).entity
    assert "note" not in {p.name for p in order.properties}
    [doc] = mesh.store.list_documents("orders", {"doc_id": "Order/north/7"}, ["text"])
    assert "note: " + "x" * 300 in doc["text"]


async def test_a_store_failure_undoes_the_graph_write(mesh_factory, rpc_error):
    mesh = await mesh_factory(graph=True, indexer={"max_document_bytes": 2000, "graph_batch_entities": 2})
    indexer, graph = mesh.stub("indexer"), mesh.stub("graph")
    small = pb.EntityInput(type="Note", primary_key=["n"], properties=_struct({"n": "a"}))
    big = pb.EntityInput(type="Note", primary_key=["n"], properties=_struct({"n": "b", "body": "y" * 3000}))
    error = await rpc_error(indexer.IngestEntities(pb.IngestEntitiesRequest(collection="undo", entities=[small, big])))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == Reason.PAYLOAD_TOO_LARGE
    # the graph took the batch, the store refused it: the batch is in neither
    assert await graph_ids(graph, "undo") == set() == store_ids(mesh, "undo")


@pytest.mark.parametrize(
    ("request_", "reason", "field"),
    [
        (
            pb.IngestEntitiesRequest(entities=[pb.EntityInput(type="Order", primary_key=["missing"])]),
            Reason.ENTITY_INVALID,
            "entities[0].primary_key[0]",
        ),
        (
            pb.IngestEntitiesRequest(entities=[pb.EntityInput(type="no good", primary_key=["n"])]),
            Reason.ENTITY_INVALID,
            "entities[0].type",
        ),
        (
            pb.IngestEntitiesRequest(files=[pb.FileInput(data=b"kind: [\n", filename="x.yaml")]),
            Reason.GRAPH_FILE_INVALID,
            "files[0]",
        ),
        (
            pb.IngestEntitiesRequest(files=[pb.FileInput(data=b"apiVersion: v1\nkind: Pod\nmetadata: {}\n")]),
            Reason.ENTITY_INVALID,
            "files[0] document 1: metadata.name",
        ),
        (pb.IngestEntitiesRequest(max_property_chars=-1), Reason.REQUEST_INVALID, "max_property_chars"),
        (pb.IngestEntitiesRequest(collection="Bad Name"), Reason.COLLECTION_NAME_INVALID, "collection"),
    ],
)
async def test_a_bad_ingest_is_refused_naming_the_field(indexer, rpc_error, request_, reason, field):
    error = await rpc_error(indexer.IngestEntities(request_))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.reason == reason
    assert [v.field for v in error.field_violations] == [field]


async def test_a_bad_id_to_delete_is_refused(indexer, rpc_error):
    error = await rpc_error(indexer.DeleteEntities(pb.DeleteEntitiesRequest(collection="k8s", ids=["no-type"])))
    assert error.reason == Reason.ENTITY_INVALID
    assert [v.field for v in error.field_violations] == ["ids[0]"]


async def test_with_the_graph_off_entities_are_refused(mesh_factory, rpc_error):
    mesh = await mesh_factory(indexer={"graph_enabled": False})
    indexer = mesh.stub("indexer")
    for call in (
        indexer.IngestEntities(pb.IngestEntitiesRequest(collection="k8s", files=[shop()])),
        indexer.DeleteEntities(pb.DeleteEntitiesRequest(collection="k8s", ids=["Deployment/shop/frontend"])),
    ):
        error = await rpc_error(call)
        assert error.code == grpc.StatusCode.FAILED_PRECONDITION
        assert error.reason == Reason.GRAPH_DISABLED


def kustomize(path: Path) -> bytes:
    return subprocess.run(
        [shutil.which("kubectl") or "kubectl", "kustomize", str(path)], capture_output=True, check=True
    ).stdout


def _struct(values: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


@pytest.mark.parametrize("kustomization", ["", "overlays/prod"])
async def test_this_repositorys_render_lands_whole_in_both_stores(mesh, indexer, graph, kustomization):
    render = await asyncio.to_thread(kustomize, K8S / kustomization)
    collection = f"render-{kustomization.replace('/', '-') or 'base'}"
    reply = await indexer.IngestEntities(
        pb.IngestEntitiesRequest(collection=collection, files=[pb.FileInput(data=render, filename="ragmesh.yaml")])
    )
    assert await graph_ids(graph, collection) == set(reply.entity_ids) == store_ids(mesh, collection)
    # only what the render does not hold is dangling: the prod overlay's Secret comes from elsewhere
    assert {line.rsplit(" ", 1)[1] for line in reply.dangling_relations} <= {"Secret/ragmesh/ragmesh-secrets"}
    deployment = await graph.ExploreEntity(
        graph_pb.ExploreEntityRequest(collection=collection, entity_id="Deployment/ragmesh/search")
    )
    incoming = {(n.relation, n.id) for n in deployment.neighbours if n.direction == graph_pb.DIRECTION_INCOMING}
    assert ("SELECTS", "Service/ragmesh/search") in incoming
    assert ("APPLIES_TO", "NetworkPolicy/ragmesh/search") in incoming
