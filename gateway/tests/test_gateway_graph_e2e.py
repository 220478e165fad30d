"""The graph routes and MCP tools on a real mesh with the graph service (embedded LadybugDB): a small graph
written through the graph service's own UpsertEntities (a Service selecting a Deployment that uses a
ServiceAccount and has a Container calling another Service), then read over REST and with the official MCP
client, every reject path included. The Kubernetes ingestion path (through the indexer) is
test_gateway_graph_k8s.py's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from google.protobuf import struct_pb2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh_gateway.app import run_gateway

from tests.support.gateway import assert_error, settings_for

GRAPH = "/api/v1/collections/shop/graph"
WEB = "Deployment/shop/web"


def _property(name: str, value: str | float) -> pb.Property:
    v = struct_pb2.Value()
    if isinstance(value, str):
        v.string_value = value
    else:
        v.number_value = value
    return pb.Property(name=name, value=v)


def _entity(kind: str, name: str, *relations: tuple[str, str], parent: str = "", **properties: Any) -> pb.Entity:
    *workload, leaf = name.split("/")
    keys = [_property("namespace", "shop"), *(_property("workload", w) for w in workload), _property("name", leaf)]
    return pb.Entity(
        id=f"{kind}/shop/{name}",
        type=kind,
        primary_key=keys,
        properties=[_property(k.replace("__", "."), v) for k, v in properties.items()],
        relations=[pb.Relation(type=r, target_id=target) for r, target in relations],
        parent_id=parent,
    )


ENTITIES = [
    _entity("ServiceAccount", "web"),
    _entity("Service", "db"),
    _entity(
        "Deployment", "web", ("USES", "ServiceAccount/shop/web"), ("HAS", "Container/shop/web/server"), spec__replicas=2
    ),
    _entity("Service", "web", ("SELECTS", WEB)),
    _entity("Container", "web/server", ("REFERENCES", "Service/shop/db"), parent=WEB, image="shop/web:1.0"),
]


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    mesh = await mesh_factory(graph=True)
    await mesh.stub("graph").UpsertEntities(pb.UpsertEntitiesRequest(collection="shop", entities=ENTITIES))
    return mesh


@pytest.fixture(scope="module")
async def gateway_url(mesh):
    async with run_gateway(settings_for(mesh, graph_enabled=True)) as url:
        yield url


@pytest.fixture(scope="module")
async def rest(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=60) as client:
        yield client


@contextlib.asynccontextmanager
async def mcp(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def failed(result: CallToolResult, reason: str) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    assert error["reason"] == reason, error
    assert result.content[0].text.startswith(f"{reason}: ")
    return error


async def test_types_list_entity_types_relations_and_datasources(rest):
    types = (await rest.get(f"{GRAPH}/types")).json()
    assert types["collection"] == "shop" and types["datasources"] == [] and types["entities"] == 5
    assert {t["name"]: t["count"] for t in types["entity_types"]} == {
        "Container": 1,
        "Deployment": 1,
        "Service": 2,
        "ServiceAccount": 1,
    }
    assert {(r["from_type"], r["type"], r["to_type"]) for r in types["relations"]} == {
        ("Service", "SELECTS", "Deployment"),
        ("Deployment", "USES", "ServiceAccount"),
        ("Deployment", "HAS", "Container"),
        ("Container", "REFERENCES", "Service"),
    }
    # A collection without a graph has no entity types (not an error).
    empty = (await rest.get("/api/v1/collections/nothing-here/graph/types")).json()
    assert (empty["entity_types"], empty["relations"], empty["entities"]) == ([], [], 0)


async def test_rest_explores_the_ontology_an_entity_and_paths(rest):
    ontology = (await rest.get(f"{GRAPH}/ontology/Deployment", params={"depth": 2})).json()
    assert ontology["entity_type"]["name"] == "Deployment"
    assert [(r["type"], r["depth"]) for r in ontology["relations"]][-1] == ("REFERENCES", 2)

    explored = (await rest.get(f"{GRAPH}/explore/{WEB}")).json()
    assert explored["entity"]["properties"] == {"spec.replicas": 2}
    assert {(n["id"], n["relation"], n["direction"]) for n in explored["neighbours"]} == {
        ("Service/shop/web", "SELECTS", "incoming"),
        ("ServiceAccount/shop/web", "USES", "outgoing"),
        ("Container/shop/web/server", "HAS", "outgoing"),
    }
    deeper = (await rest.get(f"{GRAPH}/explore/{WEB}", params={"depth": 2, "limit": 10})).json()
    assert {"id": "Service/shop/db", "type": "Service", "relation": "REFERENCES", "direction": "outgoing", "depth": 2,
            "via_id": "Container/shop/web/server"} in deeper["neighbours"]  # fmt: skip

    details = (await rest.get(f"{GRAPH}/entities/Container/shop/web/server")).json()
    assert details["parent_id"] == WEB and details["properties"] == {"image": "shop/web:1.0"}
    assert details["primary_key"] == {"namespace": "shop", "workload": "web", "name": "server"}
    assert {(r["type"], r["target_id"], r["direction"]) for r in details["relations"]} == {
        ("REFERENCES", "Service/shop/db", "outgoing"),
        ("HAS", WEB, "incoming"),
    }

    paths = (await rest.get(f"{GRAPH}/paths", params={"from_type": "Service", "to_type": "ServiceAccount"})).json()
    assert [p["cypher"] for p in paths["paths"]] == ["(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)"]


async def test_rest_queries_read_and_a_write_is_refused_changing_nothing(rest):
    count = {"query": "MATCH (s:Service) RETURN count(s) AS n"}
    assert (await rest.post(f"{GRAPH}/query", json=count)).json() == {
        "columns": ["n"],
        "rows": [[2]],
        "truncated": False,
    }
    for statement in ("MATCH (s:Service) DETACH DELETE s", "CREATE (:Service {id: 'Service/shop/x'})"):
        assert_error(await rest.post(f"{GRAPH}/query", json={"query": statement}), 403, "QUERY_NOT_READ_ONLY")
    assert (await rest.post(f"{GRAPH}/query", json=count)).json()["rows"] == [[2]]

    by_id = {"query": "MATCH (d:Deployment {id: $id}) RETURN d.`spec.replicas` AS replicas", "parameters": {"id": WEB}}
    assert (await rest.post(f"{GRAPH}/query", json=by_id)).json()["rows"] == [[2]]
    limited = {"query": "MATCH (n) RETURN n.id ORDER BY n.id", "row_limit": 2}
    answer = (await rest.post(f"{GRAPH}/query", json=limited)).json()
    assert len(answer["rows"]) == 2 and answer["truncated"] is True
    ontology = {"query": "MATCH (t:EntityType) RETURN t.name ORDER BY t.name", "target": "ontology"}
    assert (await rest.post(f"{GRAPH}/query", json=ontology)).json()["rows"] == [
        ["Container"],
        ["Deployment"],
        ["Service"],
        ["ServiceAccount"],
    ]
    assert_error(await rest.post(f"{GRAPH}/query", json={"query": "MATCH (n RETURN n"}), 400, "QUERY_INVALID")


@pytest.mark.parametrize(
    ("path", "params", "status", "reason"),
    [
        (f"{GRAPH}/entities/Deployment/shop/nowhere", {}, 404, "ENTITY_NOT_FOUND"),
        (f"{GRAPH}/explore/Deployment/shop/nowhere", {}, 404, "ENTITY_NOT_FOUND"),
        (f"{GRAPH}/explore/not-an-id", {}, 400, "ENTITY_INVALID"),
        (f"{GRAPH}/explore/{WEB}", {"depth": 4}, 400, "DEPTH_OUT_OF_RANGE"),
        (f"{GRAPH}/explore/{WEB}", {"depth": 0}, 400, "DEPTH_OUT_OF_RANGE"),
        (f"{GRAPH}/ontology/Deployment", {"depth": 9}, 400, "DEPTH_OUT_OF_RANGE"),
        (f"{GRAPH}/ontology/Nothing", {}, 404, "ENTITY_TYPE_NOT_FOUND"),
        (
            f"{GRAPH}/paths",
            {"from_type": "Service", "to_type": "Deployment", "max_depth": 7},
            400,
            "DEPTH_OUT_OF_RANGE",
        ),
        (f"{GRAPH}/paths", {"from_type": "Service", "to_type": "Nothing"}, 404, "ENTITY_TYPE_NOT_FOUND"),
        ("/api/v1/collections/nothing-here/graph/explore/Deployment/a/b", {}, 404, "GRAPH_NOT_FOUND"),
        ("/api/v1/collections/Not_Valid/graph/types", {}, 400, "COLLECTION_NAME_INVALID"),
    ],
)
async def test_rest_reject_paths(rest, path, params, status, reason):
    assert_error(await rest.get(path, params=params), status, reason)


async def test_mcp_tools_answer_as_their_rest_twins(gateway_url, rest):
    async with mcp(gateway_url) as client:
        types = ok(await client.call_tool("fetch_datasources_and_entity_types", {"collection": "shop"}))
        ontology = ok(
            await client.call_tool(
                "graph_explore_ontology_entity", {"entity_type": "Deployment", "depth": 2, "collection": "shop"}
            )
        )
        explored = ok(await client.call_tool("graph_explore_data_entity", {"entity_id": WEB, "collection": "shop"}))
        details = ok(
            await client.call_tool(
                "graph_fetch_data_entity_details", {"entity_id": "Container/shop/web/server", "collection": "shop"}
            )
        )
        paths = ok(
            await client.call_tool(
                "graph_shortest_path_between_entity_types",
                {"from_type": "Service", "to_type": "ServiceAccount", "collection": "shop"},
            )
        )
        rows = ok(
            await client.call_tool(
                "graph_raw_query_data",
                {
                    "query": "MATCH (s:Service)-[:SELECTS]->(d:Deployment {id: $id}) RETURN s.id",
                    "parameters": {"id": WEB},
                    "collection": "shop",
                },
            )
        )
        ontology_rows = ok(
            await client.call_tool(
                "graph_raw_query_ontology",
                {"query": "MATCH (t:EntityType {name: 'Service'}) RETURN t.count", "collection": "shop"},
            )
        )
    assert types == (await rest.get(f"{GRAPH}/types")).json()
    assert ontology == (await rest.get(f"{GRAPH}/ontology/Deployment", params={"depth": 2})).json()
    assert explored == (await rest.get(f"{GRAPH}/explore/{WEB}")).json()
    assert details == (await rest.get(f"{GRAPH}/entities/Container/shop/web/server")).json()
    assert paths["paths"][0]["cypher"] == "(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)"
    assert rows["rows"] == [["Service/shop/web"]]
    assert ontology_rows["rows"] == [[2]]


async def test_mcp_reject_paths_carry_the_rest_reasons(gateway_url, rest):
    async with mcp(gateway_url) as client:
        refused = await client.call_tool(
            "graph_raw_query_data", {"query": "MATCH (d:Deployment) DETACH DELETE d", "collection": "shop"}
        )
        too_deep = await client.call_tool(
            "graph_explore_data_entity", {"entity_id": WEB, "depth": 5, "collection": "shop"}
        )
        unknown = await client.call_tool(
            "graph_fetch_data_entity_details", {"entity_id": "Deployment/shop/nowhere", "collection": "shop"}
        )
        bad_id = await client.call_tool("graph_explore_data_entity", {"entity_id": "nowhere", "collection": "shop"})
        not_there = await client.call_tool(
            "graph_explore_ontology_entity", {"entity_type": "Nothing", "collection": "shop"}
        )
    assert failed(refused, "QUERY_NOT_READ_ONLY")["code"] == "PERMISSION_DENIED"
    assert failed(too_deep, "DEPTH_OUT_OF_RANGE")["details"]["field_violations"][0]["field"] == "depth"
    assert failed(unknown, "ENTITY_NOT_FOUND")["code"] == "NOT_FOUND"
    assert failed(bad_id, "ENTITY_INVALID")["code"] == "INVALID_ARGUMENT"
    failed(not_there, "ENTITY_TYPE_NOT_FOUND")
    # The refused write changed nothing.
    assert (await rest.get(f"{GRAPH}/types")).json()["entities"] == 5
