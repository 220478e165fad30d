"""`POST /api/v1/search` with the fusion choices and presets: real HTTP to the gateway, real gRPC behind it."""

from __future__ import annotations

import httpx
import pytest
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

DOCS = {
    "kiln": "A kiln fires clay pots at high heat until the glaze turns to glass.",
    "loom": "A loom weaves threads of wool into cloth, row by row.",
}


@pytest.fixture(scope="module")
async def api(mesh_factory):
    mesh = await mesh_factory()
    settings = GatewaySettings(http_port=0, **{f"{name}_addr": addr for name, addr in mesh.addrs.items()})
    async with run_gateway(settings) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        for doc_id, text in DOCS.items():
            response = await client.post("/api/v1/ingest", json={"text": text, "collection": "craft", "doc_id": doc_id})
            assert response.status_code == 200, response.text
        yield client


@pytest.mark.parametrize(
    ("body", "mode", "fusion"),
    [
        ({}, "hybrid", "adaptive"),
        ({"fusion": "relative_score"}, "hybrid", "relative_score"),
        ({"fusion": "dbsf"}, "hybrid", "dbsf"),
        ({"fusion": "rrf", "rrf_k": 10}, "hybrid", "rrf"),
        ({"mode": "semantic"}, "semantic", "rrf"),
        ({"mode": "keyword"}, "keyword", "rrf"),
        ({"mode": "dense"}, "dense", None),
    ],
)
async def test_search_takes_a_fusion_or_a_preset(api, body, mode, fusion):
    response = await api.post("/api/v1/search", json={"query": "clay glaze kiln", "collection": "craft", **body})
    assert response.status_code == 200, response.text
    found = response.json()
    assert (found["mode"], found["fusion"]) == (mode, fusion)
    assert found["results"][0]["doc_id"] == "kiln"
    assert all(0 <= h["score"] <= 1 for h in found["results"])


@pytest.mark.parametrize("body", [{"fusion": "max"}, {"rrf_k": 0}, {"rrf_k": 10_001}, {"mode": "fuzzy"}])
async def test_bad_fusion_choices_are_rejected(api, body):
    response = await api.post("/api/v1/search", json={"query": "clay", "collection": "craft", **body})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["reason"] == "REQUEST_INVALID"
