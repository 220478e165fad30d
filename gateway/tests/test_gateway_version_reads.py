"""What versioned collections show on the read paths, over real HTTP to the gateway and real gRPC to the mesh
(hash embedder, embedded store): a search says which version answered each collection, GET /api/v1/collections
lists every version with its state, settings and counts (so does the MCP list_collections tool), and POST
.../evaluate scores another version when asked without adding it to the history.

Version 2 is written straight into the store (`kb.v2`) with its versions record, as a re-index leaves it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_gateway.app import run_gateway
from ragmesh_store.versions import IndexSettings, write_versions

from tests.support.gateway import assert_error, settings_for
from tests.support.versions import put_documents, two_versions

READ, WRITE = "vr-read", "vr-write"
V1 = {"bread": "Bread dough needs flour, water, yeast and salt.", "stale": "An old note on sourdough."}
V2 = {"bread": "Bread dough needs flour, water, yeast and salt.", "fresh": "Comets grow a glowing tail of gas."}
SETTINGS = IndexSettings(
    model="",
    model_id="ragmesh/hash-384",
    dimension=384,
    sparse_model_id="bm25",
    chunk_tokens=128,
    chunk_overlap_tokens=16,
    chunker_fingerprint="c" * 16,
)


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    await put_documents(mesh, "kb", V1, "v1")
    await put_documents(mesh, "kb.v2", V2, "v2")
    write_versions(mesh.store, two_versions("kb", 2, SETTINGS))
    return mesh


@pytest.fixture(scope="module")
async def url(mesh):
    async with run_gateway(settings_for(mesh, api_keys=f"{READ}:read, {WRITE}:write")) as url:
        yield url


@contextlib.asynccontextmanager
async def rest(url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        yield client


EXPECTED_VERSIONS = [
    {
        "version": 1,
        "state": "previous",
        "settings": None,
        "created_at": "2026-11-01T00:00:00+00:00",
        "retained_until": "2026-12-01T00:00:00+00:00",
        "job_id": "",
        "documents": 2,
        "chunks": 2,
    },
    {
        "version": 2,
        "state": "active",
        "settings": {
            "model": "",
            "model_id": "ragmesh/hash-384",
            "dimension": 384,
            "sparse_model_id": "bm25",
            "chunk_tokens": 128,
            "chunk_overlap_tokens": 16,
            "chunker_fingerprint": "c" * 16,
        },
        "created_at": "2026-11-20T00:00:00+00:00",
        "retained_until": "",
        "job_id": "job-reindex-1",
        "documents": 2,
        "chunks": 2,
    },
]


async def test_a_search_says_which_version_answered(url):
    async with rest(url, READ) as api:
        response = await api.post("/api/v1/search", json={"query": "comet tail", "collection": "kb", "top_k": 5})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["versions"] == {"kb": 2}
        assert {(hit["doc_id"], hit["title"], hit["collection"]) for hit in body["results"]} >= {("fresh", "v2", "kb")}
        assert {hit["title"] for hit in body["results"]} == {"v2"}


async def test_collections_are_listed_with_their_versions(url):
    async with rest(url, READ) as api:
        response = await api.get("/api/v1/collections")
        assert response.status_code == 200, response.text
        (kb,) = [c for c in response.json()["collections"] if c["name"] == "kb"]
        assert "kb.v2" not in {c["name"] for c in response.json()["collections"]}
        assert (kb["version"], kb["documents"], kb["chunks"]) == (2, 2, 2)
        assert kb["versions"] == EXPECTED_VERSIONS


async def test_the_mcp_list_collections_tool_shows_the_versions(url):
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {READ}"}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
    ):
        result = await mcp.call_tool("list_collections", {})
        assert not result.is_error, result.content
        (kb,) = [c for c in result.structured_content["collections"] if c["name"] == "kb"]
        assert (kb["version"], kb["versions"]) == (2, EXPECTED_VERSIONS)


async def test_evaluate_scores_another_version_without_recording_it(url):
    async with rest(url, WRITE) as api:
        golden = {"queries": [{"query_id": "q", "text": "comet tail", "relevant": {"fresh": 1}}]}
        assert (await api.put("/api/v1/collections/kb/golden", json=golden)).status_code == 200
        active = await api.post("/api/v1/collections/kb/evaluate")
        assert active.status_code == 200, active.text
        assert [(e["version"], e["ndcg_at_10"]) for e in active.json()["evaluations"]] == [(2, 1.0)]
        old = await api.post("/api/v1/collections/kb/evaluate", json={"version": 1, "modes": ["sparse"]})
        assert old.status_code == 200, old.text
        assert [(e["version"], e["mode"], e["ndcg_at_10"]) for e in old.json()["evaluations"]] == [(1, "sparse", 0.0)]
        history = (await api.get("/api/v1/collections/kb/evaluations")).json()["evaluations"]
        assert [(e["version"], e["mode"]) for e in history] == [(2, "hybrid")]

        assert_error(await api.post("/api/v1/collections/kb/evaluate", json={"version": 9}), 404, "VERSION_NOT_FOUND")
        for bad in (0, -1, "2", 2**31, 1.5):
            assert_error(
                await api.post("/api/v1/collections/kb/evaluate", json={"version": bad}), 400, "REQUEST_INVALID"
            )


async def test_the_mcp_evaluate_tool_scores_a_version(url):
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {READ}"}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
    ):
        result = await mcp.call_tool("evaluate_collection", {"collection": "kb", "modes": ["sparse"], "version": 1})
        assert not result.is_error, result.content
        assert [e["version"] for e in result.structured_content["evaluations"]] == [1]
        missing = await mcp.call_tool("evaluate_collection", {"collection": "kb", "version": 5})
        assert missing.is_error and missing.structured_content["error"]["reason"] == "VERSION_NOT_FOUND"
