"""The graph's REST routes and MCP tools exist only with RAGMESH_GRAPH_ENABLED=true, and what the gateway decides
on its own about them (scopes, collections, the graph service being down), over real HTTP and the official MCP
client, with every backend down (addresses at closed ports). The graph itself is driven end to end in
test_gateway_graph_e2e.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_gateway.app import run_gateway

from .test_gateway_http import assert_error, closed_port_addr, dead_settings

GRAPH_READ_TOOLS = {
    "fetch_datasources_and_entity_types",
    "graph_explore_ontology_entity",
    "graph_explore_data_entity",
    "graph_fetch_data_entity_details",
    "graph_shortest_path_between_entity_types",
    "graph_raw_query_data",
    "graph_raw_query_ontology",
}
GRAPH_WRITE_TOOLS = {"graph_ingest"}
GRAPH_PATHS = {
    "/api/v1/collections/{name}/graph/types",
    "/api/v1/collections/{name}/graph/ontology/{entity_type}",
    "/api/v1/collections/{name}/graph/explore/{entity_id}",
    "/api/v1/collections/{name}/graph/entities/{entity_id}",
    "/api/v1/collections/{name}/graph/paths",
    "/api/v1/collections/{name}/graph/query",
    "/api/v1/collections/{name}/graph/ingest",
    "/api/v1/collections/{name}/graph/ingest/files",
}
KEYS = "k-read:read, k-write:write, k-notes:write:notes"


@contextlib.asynccontextmanager
async def gateway(**settings: object) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    async with run_gateway(dead_settings(graph_addr=closed_port_addr(), **settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield url, client


@contextlib.asynccontextmanager
async def mcp_client(url: str, key: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


async def test_without_the_graph_its_routes_and_tools_do_not_exist():
    async with gateway() as (url, rest):
        paths = set((await rest.get("/openapi.json")).json()["paths"])
        assert not {p for p in paths if "/graph" in p}
        assert_error(await rest.get("/api/v1/collections/k8s/graph/types"), 404, "ROUTE_NOT_FOUND")
        assert_error(
            await rest.post("/api/v1/collections/k8s/graph/query", json={"query": "MATCH (n) RETURN n"}),
            404,
            "ROUTE_NOT_FOUND",
        )
        async with mcp_client(url) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            called = await client.call_tool("graph_raw_query_data", {"query": "MATCH (n) RETURN n"})
            instructions = client.instructions or ""
        ready = assert_error(await rest.get("/ready"), 503, "SERVICES_NOT_READY")
    assert "search" in tools and not tools & (GRAPH_READ_TOOLS | GRAPH_WRITE_TOOLS)
    assert "search" in instructions and "graph" not in instructions
    assert called.is_error and called.structured_content["error"]["reason"] == "TOOL_NOT_FOUND"
    assert "graph" not in ready["details"]["services"].split(",")


async def test_with_the_graph_the_routes_and_described_read_only_tools_exist():
    async with gateway(graph_enabled=True) as (url, rest):
        spec = (await rest.get("/openapi.json")).json()
        async with mcp_client(url) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            instructions = client.instructions or ""
        ready = assert_error(await rest.get("/ready"), 503, "SERVICES_NOT_READY")
    assert GRAPH_PATHS <= set(spec["paths"])
    assert set(spec["paths"]["/api/v1/collections/{name}/graph/entities/{entity_id}"]) == {"get", "delete"}
    assert GRAPH_READ_TOOLS | GRAPH_WRITE_TOOLS <= set(tools)
    assert "fetch_datasources_and_entity_types" in instructions
    for name in GRAPH_READ_TOOLS:
        tool = tools[name]
        assert tool.annotations.read_only_hint is True, name
        assert tool.output_schema, name
        assert "collection" in tool.input_schema["properties"], name
        for parameter, schema in tool.input_schema["properties"].items():
            assert schema.get("description"), f"{name}.{parameter} has no description"
    assert tools["graph_ingest"].annotations.read_only_hint is False
    # What an assistant needs to use them: the id format, relation directions, an example query.
    assert "'<type>/<primary key values" in tools["fetch_datasources_and_entity_types"].description
    assert "incoming" in tools["graph_explore_data_entity"].description
    assert "MATCH (" in tools["graph_raw_query_data"].description
    depth = tools["graph_explore_data_entity"].input_schema["properties"]["depth"]
    assert (depth["minimum"], depth["maximum"], depth["default"]) == (1, 3, 1)
    assert "graph" in ready["details"]["services"].split(",")


async def test_the_graph_service_down_is_a_503_naming_it():
    async with gateway(graph_enabled=True) as (url, rest):
        error = assert_error(
            await rest.get("/api/v1/collections/k8s/graph/explore/Deployment/ragmesh/search"),
            503,
            "SERVICE_UNAVAILABLE",
        )
        async with mcp_client(url) as client:
            called = await client.call_tool("graph_explore_data_entity", {"entity_id": "Deployment/ragmesh/search"})
    assert "graph" in error["message"]
    assert called.is_error and called.structured_content["error"]["reason"] == "SERVICE_UNAVAILABLE"


@pytest.mark.parametrize(
    ("key", "method", "path", "kwargs", "reason"),
    [
        # A read key may not ingest or delete entities.
        ("k-read", "POST", "/api/v1/collections/k8s/graph/ingest", {"json": {"entities": []}}, "SCOPE_INSUFFICIENT"),
        (
            "k-read",
            "POST",
            "/api/v1/collections/k8s/graph/ingest/files",
            {"files": {"files": ("k8s.yaml", b"kind: Namespace", "application/yaml")}},
            "SCOPE_INSUFFICIENT",
        ),
        ("k-read", "DELETE", "/api/v1/collections/k8s/graph/entities/Service/a/b", {}, "SCOPE_INSUFFICIENT"),
        # A key limited to the collection "notes" may not read, query or write another collection's graph.
        ("k-notes", "GET", "/api/v1/collections/k8s/graph/types", {}, "COLLECTION_FORBIDDEN"),
        ("k-notes", "GET", "/api/v1/collections/k8s/graph/entities/Service/a/b", {}, "COLLECTION_FORBIDDEN"),
        ("k-notes", "GET", "/api/v1/collections/k8s/graph/explore/Service/a/b", {}, "COLLECTION_FORBIDDEN"),
        ("k-notes", "GET", "/api/v1/collections/k8s/graph/ontology/Service", {}, "COLLECTION_FORBIDDEN"),
        (
            "k-notes",
            "GET",
            "/api/v1/collections/k8s/graph/paths",
            {"params": {"from_type": "Service", "to_type": "Deployment"}},
            "COLLECTION_FORBIDDEN",
        ),
        (
            "k-notes",
            "POST",
            "/api/v1/collections/k8s/graph/query",
            {"json": {"query": "MATCH (n) RETURN n"}},
            "COLLECTION_FORBIDDEN",
        ),
        ("k-notes", "DELETE", "/api/v1/collections/k8s/graph/entities/Service/a/b", {}, "COLLECTION_FORBIDDEN"),
    ],
)
async def test_keys_are_held_to_their_scope_and_collections(key, method, path, kwargs, reason):
    async with gateway(graph_enabled=True, api_keys=KEYS) as (_, rest):
        response = await rest.request(method, path, headers={"Authorization": f"Bearer {key}"}, **kwargs)
    assert_error(response, 403, reason)


async def test_mcp_tools_hold_keys_to_their_scope_and_collections():
    async with gateway(graph_enabled=True, api_keys=KEYS) as (url, _):
        async with mcp_client(url, "k-read") as client:
            read_tools = {tool.name for tool in (await client.list_tools()).tools}
        async with mcp_client(url, "k-notes") as client:
            forbidden = await client.call_tool(
                "graph_explore_data_entity", {"entity_id": "Deployment/ragmesh/search", "collection": "k8s"}
            )
            also = await client.call_tool("graph_raw_query_data", {"query": "MATCH (n) RETURN n"})  # "default"
    assert GRAPH_READ_TOOLS <= read_tools and not read_tools & GRAPH_WRITE_TOOLS
    for result in (forbidden, also):
        assert result.is_error and result.structured_content["error"]["reason"] == "COLLECTION_FORBIDDEN"
        assert result.structured_content["error"]["code"] == "PERMISSION_DENIED"


async def test_a_wrong_method_on_an_entity_names_every_method_it_has():
    async with gateway(graph_enabled=True) as (_, rest):
        for entity_id in ("Deployment/ragmesh/search", "malformed"):  # an id the service would refuse, too
            response = await rest.put(f"/api/v1/collections/k8s/graph/entities/{entity_id}")
            assert_error(response, 405, "METHOD_NOT_ALLOWED")
            assert response.headers["allow"] == "DELETE, GET"
