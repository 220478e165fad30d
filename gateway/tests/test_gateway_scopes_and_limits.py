"""Keys with scopes and collections, rate limits and back-pressure, on REST and MCP, against the real gateway
(uvicorn on a free port) over the in-process mesh (hash embedder): a read key cannot write and does not even
see the write tools, a key limited to some collections cannot touch the others, a client over its rate gets
429 with Retry-After, and a full embedder queue is 429 with Retry-After on REST while the MCP ingest tools wait
and retry."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_common.config import ConfigError, load
from ragmesh_gateway.app import create_app, run_gateway
from ragmesh_gateway.auth import RateLimiter, require_scope
from ragmesh_gateway.config import GatewaySettings

from tests.support.gateway import settings_for

READ, WRITE, NOTES, ADMIN, SLOW = "k-read", "k-write", "k-notes", "k-admin", "k-slow"
KEYS = f"{READ}:read, {WRITE}:write, {NOTES}:write:notes|drafts, {ADMIN}:admin, {SLOW}:read:*:1"
READ_TOOLS = {
    "search",
    "fetch_document",
    "convert_to_text",
    "list_collections",
    "get_job",
    "ask",
    "evaluate_collection",
}
WRITE_TOOLS = {"ingest_text", "ingest_url", "ingest_urls", "ingest_folder", "delete_document"}
ADMIN_TOOLS = {"delete_collection", "reindex_collection", "rollback_collection"}


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def url(mesh):
    async with run_gateway(settings_for(mesh, api_keys=KEYS)) as url:
        async with httpx.AsyncClient(base_url=url, headers=_auth(ADMIN)) as admin:
            for collection, doc_id in (("docs", "d1"), ("notes", "n1")):
                response = await admin.post(
                    "/api/v1/ingest",
                    json={
                        "text": f"Tidal pools hold anemones ({collection}).",
                        "collection": collection,
                        "doc_id": doc_id,
                    },
                )
                assert response.status_code == 200, response.text
        yield url


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


@contextlib.asynccontextmanager
async def rest(url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, headers=_auth(key), timeout=60) as client:
        yield client


@contextlib.asynccontextmanager
async def mcp(url: str, key: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=_auth(key), timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def _error(response: httpx.Response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["reason"] == reason, error
    return error


# --- configuration ----------------------------------------------------------------------------------------------
def test_key_entries_parse_into_scopes_collections_and_rates(monkeypatch):
    monkeypatch.setenv("RAGMESH_API_KEYS", "legacy, r:read, w:write:notes|drafts, a:admin:*:2.5")
    keys = load(GatewaySettings).api_keys
    assert [(k.scope, k.collections, k.rate_limit) for k in keys] == [
        ("admin", None, None),
        ("read", None, None),
        ("write", frozenset({"notes", "drafts"}), None),
        ("admin", None, 2.5),
    ]
    assert "legacy" not in repr(keys)


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("ok, :read", "entry 2 has an empty key"),
        ("sekrit:owner", "entry 1 has scope 'owner'"),
        ("sekrit:read:Bad Name", "entry 1 names invalid collection(s) 'Bad Name'"),
        ("sekrit:read:*:fast", "entry 1 has rate 'fast'"),
        ("sekrit:read:*:1:extra", "entry 1 has 5 ':'-separated fields"),
        ("sekrit, sekrit:read", "entry 2 repeats an earlier key"),
    ],
)
def test_a_malformed_key_entry_stops_start_up_naming_its_position_not_the_key(monkeypatch, value, complaint):
    monkeypatch.setenv("RAGMESH_API_KEYS", value)
    with pytest.raises(ConfigError) as refused:
        load(GatewaySettings)
    message = str(refused.value.code)
    assert "RAGMESH_API_KEYS" in message and complaint in message
    assert "sekrit" not in message


def test_a_route_without_a_declared_scope_stops_the_app_from_being_built(monkeypatch):
    from fastapi import APIRouter
    from ragmesh_gateway import routes

    forgot = APIRouter(prefix="/api/v1")
    forgot.add_api_route("/open", lambda: {}, methods=["GET"])
    monkeypatch.setattr(routes, "API_ROUTERS", (*routes.API_ROUTERS, forgot))
    with pytest.raises(RuntimeError, match="/api/v1/open declares no scope"):
        create_app(GatewaySettings(http_port=0))
    scoped = APIRouter(prefix="/api/v1")
    scoped.add_api_route("/fine", lambda: {}, methods=["GET"], dependencies=[require_scope("read")])
    monkeypatch.setattr(routes, "API_ROUTERS", (*routes.API_ROUTERS[:-1], scoped))
    create_app(GatewaySettings(http_port=0))


def test_the_window_holds_the_burst_over_burst_per_rate_seconds():
    assert (RateLimiter(1.0, 0).limit(1.0).amount, RateLimiter(1.0, 0).limit(1.0).get_expiry()) == (2, 2)
    assert (RateLimiter(2.0, 3).limit(2.0).amount, RateLimiter(2.0, 3).limit(2.0).get_expiry()) == (3, 2)
    assert (RateLimiter(0.1, 0).limit(0.1).amount, RateLimiter(0.1, 0).limit(0.1).get_expiry()) == (1, 10)


async def test_the_memory_limiter_allows_the_burst_then_says_when_to_retry():
    limiter = RateLimiter(0.1, 3)  # 3 requests per 30 s
    assert [await limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = await limiter.acquire("a")
    assert 29 < wait <= 30
    assert await limiter.acquire("b") == 0.0  # budgets are per client
    assert await limiter.acquire("a", rate=0) == 0.0  # a key with rate 0 is unlimited


# --- REST -----------------------------------------------------------------------------------------------------
async def test_a_read_key_reads_but_cannot_write(url):
    async with rest(url, READ) as client:
        found = await client.post("/api/v1/search", json={"query": "anemones", "collection": "docs"})
        assert found.status_code == 200 and found.json()["results"][0]["doc_id"] == "d1"
        assert (await client.get("/api/v1/documents/d1", params={"collection": "docs"})).status_code == 200
        error = _error(
            await client.post("/api/v1/ingest", json={"text": "no", "collection": "docs"}), 403, "SCOPE_INSUFFICIENT"
        )
        assert error["details"]["required_scope"] == "write" and error["details"]["scope"] == "read"
        _error(await client.delete("/api/v1/documents/d1", params={"collection": "docs"}), 403, "SCOPE_INSUFFICIENT")
        upload = await client.post("/api/v1/ingest/file", files={"file": ("a.txt", b"hello")})
        _error(upload, 403, "SCOPE_INSUFFICIENT")


async def test_only_an_admin_key_deletes_a_collection(url):
    async with rest(url, WRITE) as client:
        _error(await client.delete("/api/v1/collections/docs", params={"confirm": "true"}), 403, "SCOPE_INSUFFICIENT")
    async with rest(url, ADMIN) as client:
        _error(
            await client.delete("/api/v1/collections/scratch", params={"confirm": "true"}), 404, "COLLECTION_NOT_FOUND"
        )


async def test_a_key_limited_to_collections_touches_only_those(url):
    async with rest(url, NOTES) as client:
        listed = {c["name"] for c in (await client.get("/api/v1/collections")).json()["collections"]}
        assert "notes" in listed and listed <= {"notes", "drafts"}  # not docs, not default
        assert (await client.post("/api/v1/search", json={"query": "anemones", "collection": "notes"})).json()[
            "results"
        ][0]["doc_id"] == "n1"
        forbidden = [
            client.post("/api/v1/search", json={"query": "anemones", "collection": "docs"}),
            client.post("/api/v1/search", json={"query": "anemones", "collections": ["notes", "docs"]}),
            client.post("/api/v1/search", json={"query": "anemones"}),  # the default collection
            client.get("/api/v1/documents/d1", params={"collection": "docs"}),
            client.post("/api/v1/ingest", json={"text": "sneaky", "collection": "docs"}),
            client.post("/api/v1/ingest/batch", json={"collection": "docs", "documents": [{"text": "x"}]}),
            client.post("/api/v1/ingest/file", files={"file": ("a.txt", b"hi")}, data={"collection": "docs"}),
        ]
        for call in forbidden:
            error = _error(await call, 403, "COLLECTION_FORBIDDEN")
            assert error["details"]["allowed_collections"] == "drafts,notes"
        ingested = await client.post(
            "/api/v1/ingest/file", files={"file": ("a.txt", b"draft text")}, data={"collection": "drafts"}
        )
        assert ingested.status_code == 200, ingested.text


async def test_a_client_over_its_rate_gets_429_with_retry_after(url):
    async with rest(url, SLOW) as client:
        statuses = [(await client.get("/api/v1/collections")) for _ in range(4)]
    assert [r.status_code for r in statuses[:2]] == [200, 200]  # the burst (twice the rate of 1/s)
    limited = statuses[2]
    error = _error(limited, 429, "RATE_LIMITED")
    assert int(limited.headers["retry-after"]) >= 1 and error["details"]["retry_after_seconds"] > 0
    async with rest(url, READ) as other:  # limits are per key
        assert (await other.get("/api/v1/collections")).status_code == 200
    await asyncio.sleep(float(limited.headers["retry-after"]))
    async with rest(url, SLOW) as client:
        assert (await client.get("/api/v1/collections")).status_code == 200


# --- MCP ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "tools"),
    [(READ, READ_TOOLS), (WRITE, READ_TOOLS | WRITE_TOOLS), (ADMIN, READ_TOOLS | WRITE_TOOLS | ADMIN_TOOLS)],
)
async def test_an_mcp_session_sees_only_the_tools_its_key_allows(url, key, tools):
    async with mcp(url, key) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == tools
        if key == READ:
            refused = await client.call_tool("ingest_text", {"text": "no", "collection": "docs"})
            assert refused.is_error and refused.structured_content["error"]["reason"] == "TOOL_NOT_FOUND"


async def test_an_mcp_key_limited_to_collections_touches_only_those(url):
    async with mcp(url, NOTES) as client:
        listed = {c["name"] for c in (await client.call_tool("list_collections", {})).structured_content["collections"]}
        assert "notes" in listed and listed <= {"notes", "drafts"}
        found = await client.call_tool("search", {"query": "anemones", "collection": "notes"})
        assert not found.is_error and found.structured_content["results"][0]["doc_id"] == "n1"
        for name, arguments in (
            ("search", {"query": "anemones", "collection": "docs"}),
            ("fetch_document", {"doc_id": "d1"}),
            ("ingest_text", {"text": "sneaky", "collection": "docs"}),
        ):
            refused = await client.call_tool(name, arguments)
            assert refused.is_error, name
            assert refused.structured_content["error"]["reason"] == "COLLECTION_FORBIDDEN", name


async def test_a_key_limited_to_collections_sees_and_touches_only_their_jobs(url):
    async with rest(url, ADMIN) as admin:
        theirs = await admin.post("/api/v1/jobs", json={"collection": "docs", "documents": [{"text": "Kelp."}]})
        assert theirs.status_code == 202, theirs.text
    other_job = theirs.json()["job_id"]
    async with rest(url, NOTES) as client:
        mine = await client.post("/api/v1/jobs", json={"collection": "notes", "documents": [{"text": "Coral."}]})
        assert mine.status_code == 202, mine.text
        _error(
            await client.post("/api/v1/jobs", json={"collection": "docs", "documents": [{"text": "x"}]}),
            403,
            "COLLECTION_FORBIDDEN",
        )
        listed = {job["collection"] for job in (await client.get("/api/v1/jobs")).json()["jobs"]}
        assert listed == {"notes"}
        _error(await client.get(f"/api/v1/jobs/{other_job}"), 403, "COLLECTION_FORBIDDEN")
        _error(await client.post(f"/api/v1/jobs/{other_job}/cancel"), 403, "COLLECTION_FORBIDDEN")
        assert (await client.get(f"/api/v1/jobs/{mine.json()['job_id']}")).status_code == 200
        _error(await client.post("/api/v1/datasources/sync", json={}), 403, "COLLECTION_REQUIRED")
        _error(await client.get("/api/v1/datasources", params={"collection": "docs"}), 403, "COLLECTION_FORBIDDEN")
    async with rest(url, READ) as client:
        _error(await client.post("/api/v1/jobs", json={"documents": [{"text": "x"}]}), 403, "SCOPE_INSUFFICIENT")
        _error(await client.post(f"/api/v1/jobs/{other_job}/cancel"), 403, "SCOPE_INSUFFICIENT")
    async with mcp(url, NOTES) as client:
        refused = await client.call_tool("get_job", {"job_id": other_job})
        assert refused.is_error and refused.structured_content["error"]["reason"] == "COLLECTION_FORBIDDEN"


async def test_an_mcp_key_limited_to_collections_reads_only_their_documents_as_resources(url):
    from mcp import MCPError

    async with mcp(url, NOTES) as client:
        read = await client.read_resource("ragmesh://notes/n1")
        assert "anemones" in read.contents[0].text
        with pytest.raises(MCPError) as refused:
            await client.read_resource("ragmesh://docs/d1")
        assert "COLLECTION_FORBIDDEN" in str(refused.value)


# --- back-pressure: the embedder's queue is full ---------------------------------------------------------------
@pytest.fixture(scope="module")
async def busy_url(mesh_factory):
    # A queue of 2 texts, each micro-batch taking 300 ms: concurrent ingests overflow it.
    busy = await mesh_factory(
        embedder={"max_queue_texts": 2, "max_texts_per_request": 2, "hash_delay_ms": 300},
        indexer={"max_concurrent_documents": 16},
    )
    async with run_gateway(settings_for(busy)) as url:
        yield url


async def test_a_full_embedder_queue_is_429_with_retry_after_and_a_retry_succeeds(busy_url):
    async with httpx.AsyncClient(base_url=busy_url, timeout=60) as client:
        responses = await asyncio.gather(
            *(
                client.post(
                    "/api/v1/ingest", json={"text": f"Sea urchin number {i}.", "collection": "busy", "doc_id": f"u{i}"}
                )
                for i in range(12)
            )
        )
        refused = [r for r in responses if r.status_code != 200]
        assert refused, "the queue never filled"
        for response in refused:
            error = _error(response, 429, "QUEUE_FULL")
            assert error["code"] == "RESOURCE_EXHAUSTED" and error["details"]["domain"] == "embedder.ragmesh"
            assert response.headers["retry-after"] == "1" and error["details"]["retry_after_seconds"] == 1
        await asyncio.sleep(int(refused[0].headers["retry-after"]))
        retried = await client.post(
            "/api/v1/ingest", content=refused[0].request.content, headers={"content-type": "application/json"}
        )
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] == "indexed"


def _queue_full_refusals() -> float:
    from ragmesh_common.telemetry import setup_telemetry

    return (
        setup_telemetry("embedder").registry.get_sample_value(
            "ragmesh_grpc_server_handling_seconds_count",
            {
                "grpc_service": "ragmesh.embedder.v1.EmbedderService",
                "grpc_method": "Embed",
                "grpc_code": "RESOURCE_EXHAUSTED",
            },
        )
        or 0.0
    )


async def test_mcp_ingest_waits_out_a_full_queue(busy_url):
    refused_before = _queue_full_refusals()
    async with mcp(busy_url, "") as client:
        results = await asyncio.gather(
            *(
                client.call_tool("ingest_text", {"text": f"Starfish number {i}.", "collection": "busy-mcp"})
                for i in range(10)
            )
        )
    assert _queue_full_refusals() > refused_before, "the queue never filled"
    assert all(not r.is_error for r in results), [r.structured_content for r in results if r.is_error]
    assert {r.structured_content["status"] for r in results} == {"indexed"}
