"""Golden sets and evaluations over REST and MCP: real HTTP to the gateway, real gRPC to the mesh (root conftest's
`mesh_factory`: hash embedder, embedded store), with scoped API keys."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

READ, WRITE, NOTES = "g-read", "g-write", "g-notes"
KEYS = f"{READ}:read, {WRITE}:write, {NOTES}:write:notes"
DOCS = {
    "bread": "Bread dough needs flour, water, yeast and salt.",
    "comet": "Comets grow a glowing tail of gas and dust near the sun.",
}
GOLDEN = {
    "queries": [
        {"query_id": "q1", "text": "yeast flour dough", "relevant": {"bread": 2}},
        {"query_id": "q2", "text": "comet tail", "relevant": {"comet": 1, "bread": 0}},
    ]
}


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def url(mesh):
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, api_keys=KEYS, **addrs)) as url:
        async with client(url, WRITE) as writer:
            for doc_id, text in DOCS.items():
                body = {"text": text, "collection": "kb", "doc_id": doc_id}
                response = await writer.post("/api/v1/ingest", json=body)
                assert response.status_code == 200, response.text
        yield url


@contextlib.asynccontextmanager
async def client(url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        yield http


def error(response: httpx.Response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["reason"] == reason, body
    return body


async def test_golden_set_lifecycle_evaluation_and_history_over_rest(url):
    async with client(url, WRITE) as api:
        stored = await api.put("/api/v1/collections/kb/golden", json=GOLDEN)
        assert stored.status_code == 200, stored.text
        summary = stored.json()
        assert (summary["collection"], summary["queries"], summary["judgments"]) == ("kb", 2, 3)
        read = (await api.get("/api/v1/collections/kb/golden")).json()
        assert read["queries"] == GOLDEN["queries"] and read["golden_set_id"] == summary["golden_set_id"]

        first = await api.post("/api/v1/collections/kb/evaluate", json={"modes": ["sparse", "dense"]})
        assert first.status_code == 200, first.text
        sparse, dense = first.json()["evaluations"]
        assert (sparse["mode"], dense["mode"]) == ("sparse", "dense")
        assert (sparse["ndcg_at_10"], sparse["recall_at_10"], sparse["mrr_at_10"]) == (1.0, 1.0, 1.0)
        assert sparse["queries"] == 2 and sparse["documents"] == 2 and sparse["fusion"] is None
        default = (await api.post("/api/v1/collections/kb/evaluate")).json()["evaluations"]  # no body
        assert [e["mode"] for e in default] == ["hybrid"] and default[0]["fusion"] == "adaptive"

        history = (await api.get("/api/v1/collections/kb/evaluations")).json()
        assert history["evaluations"][-3:] == [sparse, dense, default[0]]
        only = (await api.get("/api/v1/collections/kb/evaluations", params={"mode": "sparse", "limit": 1})).json()
        assert only["evaluations"] == [sparse]

        deleted = await api.delete("/api/v1/collections/kb/golden")
        assert deleted.json() == {"collection": "kb", "deleted_queries": 2}
        error(await api.get("/api/v1/collections/kb/golden"), 404, "GOLDEN_SET_NOT_FOUND")
        error(await api.post("/api/v1/collections/kb/evaluate"), 404, "GOLDEN_SET_NOT_FOUND")
        # The history stays.
        assert len((await api.get("/api/v1/collections/kb/evaluations")).json()["evaluations"]) == 3


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"queries": []}, 400, "REQUEST_INVALID"),
        ({"queries": [{"query_id": "q", "text": "yeast", "relevant": {"bread": 11}}]}, 400, "GOLDEN_GRADE_INVALID"),
        ({"queries": [{"query_id": "q", "text": "yeast", "relevant": {"bread": 10**12}}]}, 400, "GOLDEN_GRADE_INVALID"),
        ({"queries": [{"query_id": "q", "text": "yeast", "relevant": {"bread": "1"}}]}, 400, "REQUEST_INVALID"),
        ({"queries": [{"query_id": "q", "text": "yeast", "relevant": {"bread": 0}}]}, 400, "GOLDEN_QUERY_INVALID"),
        (
            {"queries": [{"query_id": "q", "text": "yeast", "relevant": {"bread": 1}, "extra": 1}]},
            400,
            "REQUEST_INVALID",
        ),
        (
            {
                "queries": [
                    {"query_id": "q", "text": "a", "relevant": {"bread": 1}},
                    {"query_id": "q", "text": "b", "relevant": {"bread": 1}},
                ]
            },
            400,
            "GOLDEN_QUERY_DUPLICATE",
        ),
        (
            {"queries": [{"query_id": "q", "text": "yeast", "relevant": {"missing": 1}}]},
            404,
            "GOLDEN_DOCUMENT_NOT_FOUND",
        ),
    ],
    ids=[
        "empty",
        "grade-11",
        "grade-huge",
        "grade-text",
        "nothing-relevant",
        "unknown-field",
        "duplicate",
        "missing-document",
    ],
)
async def test_malformed_golden_sets_are_refused(url, body, status, reason):
    async with client(url, WRITE) as api:
        error(await api.put("/api/v1/collections/kb/golden", json=body), status, reason)


async def test_unknown_collections_are_404(url):
    async with client(url, WRITE) as api:
        error(await api.put("/api/v1/collections/nowhere/golden", json=GOLDEN), 404, "COLLECTION_NOT_FOUND")
        error(await api.post("/api/v1/collections/nowhere/evaluate"), 404, "COLLECTION_NOT_FOUND")
        error(await api.get("/api/v1/collections/nowhere/evaluations"), 404, "COLLECTION_NOT_FOUND")
        error(await api.get("/api/v1/collections/Bad%20Name/golden"), 400, "COLLECTION_NAME_INVALID")


async def test_scopes_read_evaluates_write_stores_and_collection_limits_hold(url):
    async with client(url, WRITE) as writer:
        assert (await writer.put("/api/v1/collections/kb/golden", json=GOLDEN)).status_code == 200
    async with client(url, READ) as reader:
        error(await reader.put("/api/v1/collections/kb/golden", json=GOLDEN), 403, "SCOPE_INSUFFICIENT")
        error(await reader.delete("/api/v1/collections/kb/golden"), 403, "SCOPE_INSUFFICIENT")
        assert (await reader.get("/api/v1/collections/kb/golden")).status_code == 200
        assert (await reader.post("/api/v1/collections/kb/evaluate", json={"modes": ["sparse"]})).status_code == 200
    async with client(url, NOTES) as notes:
        error(await notes.get("/api/v1/collections/kb/golden"), 403, "COLLECTION_FORBIDDEN")
        error(await notes.post("/api/v1/collections/kb/evaluate"), 403, "COLLECTION_FORBIDDEN")
        error(await notes.get("/api/v1/collections/kb/evaluations"), 403, "COLLECTION_FORBIDDEN")


async def test_the_mcp_tool_evaluates_with_a_read_key(url):
    async with client(url, WRITE) as writer:
        assert (await writer.put("/api/v1/collections/kb/golden", json=GOLDEN)).status_code == 200
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {READ}"}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as mcp,
    ):
        result = await mcp.call_tool("evaluate_collection", {"collection": "kb", "modes": ["sparse"]})
        assert not result.is_error, result.content
        (evaluation,) = result.structured_content["evaluations"]
        assert (evaluation["mode"], evaluation["ndcg_at_10"], evaluation["queries"]) == ("sparse", 1.0, 2)
        missing = await mcp.call_tool("evaluate_collection", {"collection": "nowhere"})
        assert missing.is_error and missing.structured_content["error"]["reason"] == "COLLECTION_NOT_FOUND"


async def test_evaluate_refuses_a_mode_named_twice_or_unknown(url):
    async with client(url, READ) as api:
        error(
            await api.post("/api/v1/collections/kb/evaluate", json={"modes": ["sparse", "sparse"]}),
            400,
            "REQUEST_INVALID",
        )
        error(await api.post("/api/v1/collections/kb/evaluate", json={"modes": ["fuzzy"]}), 400, "REQUEST_INVALID")
