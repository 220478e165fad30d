"""The graph through the gateway, end to end: this repository's Kubernetes manifests (`kubectl kustomize
deploy/k8s`) ingested over REST into a real mesh with the graph service (embedded LadybugDB), then the questions
an assistant asks, answered with the official MCP client over streamable HTTP, and their REST twins."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
from ragmesh_gateway.app import run_gateway

from tests.support.gateway import assert_error, settings_for

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = "k8s"
GRAPH = f"/api/v1/collections/{COLLECTION}/graph"
SEARCH = "Deployment/ragmesh/search"


@pytest.fixture(scope="module")
def k8s_yaml() -> bytes:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/k8s (kubectl kustomize)")
    return subprocess.run([kubectl, "kustomize", str(ROOT / "deploy" / "k8s")], capture_output=True, check=True).stdout


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory(graph=True)


@pytest.fixture(scope="module")
async def gateway_url(mesh):
    async with run_gateway(settings_for(mesh, graph_enabled=True)) as url:
        yield url


@pytest.fixture(scope="module")
async def rest(gateway_url):
    async with httpx.AsyncClient(base_url=gateway_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
async def ingested(rest, k8s_yaml) -> dict[str, Any]:
    response = await rest.post(f"{GRAPH}/ingest/files", files={"files": ("k8s.yaml", k8s_yaml, "application/yaml")})
    assert response.status_code == 200, response.text
    return response.json()


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


def neighbours(explored: dict[str, Any], relation: str, direction: str) -> set[str]:
    return {
        n["id"]
        for n in explored["neighbours"]
        if n["relation"] == relation and n["direction"] == direction and n["via_id"] == explored["entity"]["id"]
    }


async def test_ingesting_the_manifests_counts_each_kind_and_relation(ingested, k8s_yaml):
    kinds = [line.removeprefix("kind: ") for line in k8s_yaml.decode().splitlines() if line.startswith("kind: ")]
    for kind in ("Deployment", "Service", "ServiceAccount", "ConfigMap", "NetworkPolicy"):
        assert ingested["entity_types"][kind] == kinds.count(kind), kind
    assert {"SELECTS", "USES", "HAS"} <= set(ingested["relation_types"])
    assert "Deployment/ragmesh/search" in ingested["entity_ids"]


async def test_an_assistant_finds_the_services_that_send_traffic_to_a_deployment(gateway_url, ingested):
    async with mcp(gateway_url) as client:
        types = ok(await client.call_tool("fetch_datasources_and_entity_types", {"collection": COLLECTION}))
        ontology = ok(
            await client.call_tool(
                "graph_explore_ontology_entity", {"entity_type": "Deployment", "collection": COLLECTION}
            )
        )
        explored = ok(
            await client.call_tool(
                "graph_explore_data_entity", {"entity_id": "Deployment/ragmesh/search", "collection": COLLECTION}
            )
        )
    counts = {t["name"]: t["count"] for t in types["entity_types"]}
    assert counts["Deployment"] == ingested["entity_types"]["Deployment"]
    assert {"from_type": "Service", "type": "SELECTS", "to_type": "Deployment"}.items() <= next(
        r for r in ontology["relations"] if r["type"] == "SELECTS"
    ).items()
    assert explored["entity"]["id"] == "Deployment/ragmesh/search"
    assert neighbours(explored, "SELECTS", "incoming") == {"Service/ragmesh/search"}


async def test_an_assistant_finds_what_a_container_calls(gateway_url, ingested):
    container = "Container/ragmesh/gateway/server"  # "Container/<namespace>/<workload>/<container>"
    async with mcp(gateway_url) as client:
        gateway = ok(
            await client.call_tool(
                "graph_explore_data_entity", {"entity_id": "Deployment/ragmesh/gateway", "collection": COLLECTION}
            )
        )
        explored = ok(
            await client.call_tool("graph_explore_data_entity", {"entity_id": container, "collection": COLLECTION})
        )
        details = ok(
            await client.call_tool(
                "graph_fetch_data_entity_details", {"entity_id": container, "collection": COLLECTION}
            )
        )
    assert container in neighbours(gateway, "HAS", "outgoing")
    called = neighbours(explored, "REFERENCES", "outgoing")
    assert {f"Service/ragmesh/{name}" for name in ("indexer", "search", "answer")} <= called
    assert details["parent_id"] == "Deployment/ragmesh/gateway"


async def test_shortest_paths_between_types_read_as_cypher(gateway_url, rest, ingested):
    async with mcp(gateway_url) as client:
        paths = ok(
            await client.call_tool(
                "graph_shortest_path_between_entity_types",
                {"from_type": "Service", "to_type": "ServiceAccount", "collection": COLLECTION},
            )
        )
    cyphers = [p["cypher"] for p in paths["paths"]]
    assert "(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)" in cyphers
    response = await rest.get(f"{GRAPH}/paths", params={"from_type": "Service", "to_type": "ServiceAccount"})
    assert [p["cypher"] for p in response.json()["paths"]] == cyphers


async def test_read_queries_answer_and_a_write_query_is_refused_changing_nothing(gateway_url, rest, ingested):
    count = "MATCH (d:Deployment) RETURN count(d) AS n"
    async with mcp(gateway_url) as client:
        before = ok(await client.call_tool("graph_raw_query_data", {"query": count, "collection": COLLECTION}))
        refused = await client.call_tool(
            "graph_raw_query_data", {"query": "MATCH (d:Deployment) DETACH DELETE d", "collection": COLLECTION}
        )
        ontology = ok(
            await client.call_tool(
                "graph_raw_query_ontology",
                {"query": "MATCH (t:EntityType) RETURN t.name ORDER BY t.name", "collection": COLLECTION},
            )
        )
        after = ok(await client.call_tool("graph_raw_query_data", {"query": count, "collection": COLLECTION}))
    assert before["rows"] == after["rows"] == [[ingested["entity_types"]["Deployment"]]]
    error = failed(refused, "QUERY_NOT_READ_ONLY")
    assert error["code"] == "PERMISSION_DENIED"
    assert ["Deployment"] in ontology["rows"]
    # The REST twin: 403 with the same reason, and still nothing changed.
    response = await rest.post(f"{GRAPH}/query", json={"query": "MATCH (s:Service) SET s.name = 'x' RETURN s"})
    assert_error(response, 403, "QUERY_NOT_READ_ONLY")
    response = await rest.post(
        f"{GRAPH}/query",
        json={
            "query": "MATCH (d:Deployment) WHERE d.id = $id RETURN d.id",
            "parameters": {"id": "Deployment/ragmesh/search"},
        },
    )
    assert response.json()["rows"] == [["Deployment/ragmesh/search"]]


async def test_entity_details_and_the_reject_paths(gateway_url, rest, ingested):
    details = (await rest.get(f"{GRAPH}/entities/Deployment/ragmesh/search")).json()
    assert details["id"] == "Deployment/ragmesh/search" and details["type"] == "Deployment"
    assert list(details["primary_key"].values()) == ["ragmesh", "search"]
    assert any(r["type"] == "SELECTS" and r["direction"] == "incoming" for r in details["relations"])

    assert_error(await rest.get(f"{GRAPH}/entities/Deployment/ragmesh/nowhere"), 404, "ENTITY_NOT_FOUND")
    assert_error(
        await rest.get(f"{GRAPH}/explore/Deployment/ragmesh/search", params={"depth": 4}), 400, "DEPTH_OUT_OF_RANGE"
    )
    assert_error(await rest.get(f"{GRAPH}/ontology/Nothing"), 404, "ENTITY_TYPE_NOT_FOUND")
    assert_error(await rest.get("/api/v1/collections/no-graph/graph/explore/Deployment/a/b"), 404, "GRAPH_NOT_FOUND")
    nothing = (await rest.get("/api/v1/collections/no-graph/graph/types")).json()
    assert nothing["entity_types"] == [] and nothing["entities"] == 0
    async with mcp(gateway_url) as client:
        failed(
            await client.call_tool(
                "graph_explore_data_entity",
                {"entity_id": "Deployment/ragmesh/search", "depth": 0 - 1, "collection": COLLECTION},
            ),
            "DEPTH_OUT_OF_RANGE",
        )
        failed(
            await client.call_tool(
                "graph_fetch_data_entity_details", {"entity_id": "Deployment/ragmesh/nowhere", "collection": COLLECTION}
            ),
            "ENTITY_NOT_FOUND",
        )


async def test_entities_ingested_as_json_are_searchable_then_deleted_from_both_stores(rest):
    entities = [
        {
            "type": "Team",
            "primary_key": ["name"],
            "properties": {"name": "platform", "mission": "keeps the glaciers of the mesh moving"},
        },
        {
            "type": "Person",
            "primary_key": ["name"],
            "properties": {"name": "ada"},
            "relations": [{"type": "MEMBER_OF", "target_id": "Team/platform"}],
        },
    ]
    stored = (await rest.post("/api/v1/collections/people/graph/ingest", json={"entities": entities})).json()
    assert stored["entity_ids"] == ["Team/platform", "Person/ada"]
    assert stored["relation_types"] == {"MEMBER_OF": 1}
    found = await rest.post(
        "/api/v1/search",
        json={
            "query": "glaciers of the mesh",
            "collection": "people",
            "filters": {"is_graph_entity": True, "graph_entity_type": "Team"},
        },
    )
    assert found.status_code == 200, found.text
    assert [hit["metadata"]["graph_entity_type"] for hit in found.json()["results"]] == ["Team"]

    deleted = await rest.delete("/api/v1/collections/people/graph/entities/Team/platform")
    assert deleted.json()["deleted_ids"] == ["Team/platform"]
    assert_error(await rest.get("/api/v1/collections/people/graph/entities/Team/platform"), 404, "ENTITY_NOT_FOUND")
    person = (await rest.get("/api/v1/collections/people/graph/entities/Person/ada")).json()
    assert person["relations"] == []
