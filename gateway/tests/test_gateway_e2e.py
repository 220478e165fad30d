"""The REST API end to end: real HTTP to the gateway, real gRPC to the four services (root conftest's
`mesh_factory`: hash embedder, embedded store in a temporary directory)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
from ragmesh_gateway.app import run_gateway

from tests.support.gateway import assert_error, settings_for

DOCUMENTS = Path("/work/shared/documents")
KEY = "e2e-key"

PANDA_TEXT = (
    "# Giant pandas\n\nThe giant panda is a bear native to south central China. It eats bamboo almost "
    "exclusively, up to twelve kilograms a day.\n\n## Habitat\n\nPandas live in mountain forests of Sichuan."
)
ROCKET_TEXT = "Liquid-fuel rockets burn kerosene and liquid oxygen in a combustion chamber to produce thrust."


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def api(mesh):
    async with run_gateway(settings_for(mesh)) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        yield client


async def test_text_lifecycle_ingest_search_fetch_delete(api):
    body = {
        "text": PANDA_TEXT,
        "collection": "zoo",
        "doc_id": "panda",
        "title": "Pandas",
        "metadata": {"kind": "animal", "legs": 4},
    }
    response = await api.post("/api/v1/ingest", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "indexed"
    assert (result["doc_id"], result["collection"]) == ("panda", "zoo")
    assert result["chunks"] >= 1
    again = await api.post("/api/v1/ingest", json=body)
    assert again.json()["status"] == "unchanged"
    await api.post("/api/v1/ingest", json={"text": ROCKET_TEXT, "collection": "zoo", "doc_id": "rocket"})

    for mode in ("hybrid", "dense", "sparse"):
        response = await api.post("/api/v1/search", json={"query": "panda bamboo", "collection": "zoo", "mode": mode})
        assert response.status_code == 200, response.text
        found = response.json()
        assert found["mode"] == mode
        assert found["query"] == "panda bamboo"
        assert found["took_ms"] >= 0
        hits = found["results"]
        assert "panda" in {h["doc_id"] for h in hits}, mode
        if mode == "sparse":  # BM25: only the panda document has these words
            assert {h["doc_id"] for h in hits} == {"panda"}
        panda = next(h for h in hits if h["doc_id"] == "panda")
        assert panda["collection"] == "zoo"
        assert panda["title"] == "Pandas"
        assert panda["metadata"] == {"kind": "animal", "legs": 4}
        assert set(panda) >= {"doc_id", "chunk_id", "chunk_index", "text", "score", "title", "collection", "metadata"}

    filtered = await api.post(
        "/api/v1/search", json={"query": "panda bamboo", "collection": "zoo", "filters": {"kind": "vehicle"}}
    )
    assert filtered.status_code == 200
    assert filtered.json()["results"] == []

    document = await api.get("/api/v1/documents/panda", params={"collection": "zoo"})
    assert document.status_code == 200, document.text
    doc = document.json()
    assert doc["doc_id"] == "panda"
    assert doc["title"] == "Pandas"
    assert "bamboo" in doc["text"] and "Sichuan" in doc["text"]
    assert [c["chunk_index"] for c in doc["chunks"]] == list(range(len(doc["chunks"])))
    assert doc["metadata"] == {"kind": "animal", "legs": 4}

    deleted = await api.delete("/api/v1/documents/panda", params={"collection": "zoo"})
    assert deleted.status_code == 200
    assert deleted.json() == {"deleted": result["chunks"]}
    assert_error(await api.get("/api/v1/documents/panda", params={"collection": "zoo"}), 404, "DOCUMENT_NOT_FOUND")
    after = await api.post("/api/v1/search", json={"query": "panda bamboo", "collection": "zoo", "mode": "sparse"})
    assert "panda" not in {h["doc_id"] for h in after.json()["results"]}


async def test_search_over_several_collections(api):
    await api.post("/api/v1/ingest", json={"text": PANDA_TEXT, "collection": "multi-a", "doc_id": "a1"})
    await api.post("/api/v1/ingest", json={"text": PANDA_TEXT, "collection": "multi-b", "doc_id": "b1"})
    response = await api.post(
        "/api/v1/search", json={"query": "giant panda", "collections": ["multi-a", "multi-b"], "mode": "sparse"}
    )
    assert response.status_code == 200, response.text
    found = {(h["collection"], h["doc_id"]) for h in response.json()["results"]}
    assert found >= {("multi-a", "a1"), ("multi-b", "b1")}


async def test_ingest_batch_keeps_request_order_and_reports_failures_in_place(api):
    documents = [
        {"text": "Alpha document about glaciers.", "doc_id": "alpha"},
        {"text": "   \n  ", "doc_id": "blank"},
        {"text": "Gamma document about volcanoes.", "doc_id": "gamma"},
    ]
    response = await api.post("/api/v1/ingest/batch", json={"collection": "batch", "documents": documents})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["doc_id"] for r in results] == ["alpha", "blank", "gamma"]
    assert [r["status"] for r in results] == ["indexed", "failed", "indexed"]
    error = results[1]["error"]
    assert set(error) == {"code", "reason", "message", "details", "request_id", "trace_id"}
    assert error["reason"] == "EMPTY_DOCUMENT"
    assert error["request_id"] == response.headers["x-request-id"]
    fetched = await api.get("/api/v1/documents/gamma", params={"collection": "batch"})
    assert "volcanoes" in fetched.json()["text"]


async def test_ingest_real_file_and_refuse_unknown_format(api):
    data = (DOCUMENTS / "test.docx").read_bytes()
    response = await api.post(
        "/api/v1/ingest/file",
        files={"file": ("test.docx", data, "application/octet-stream")},
        data={"collection": "files", "metadata": '{"team": "research"}'},
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "indexed"
    assert result["chunks"] >= 1
    assert "wordprocessingml" in result["mime_type"]
    hits = (
        await api.post(
            "/api/v1/search",
            json={"query": "AutoGen multi-agent conversation", "collection": "files", "filters": {"team": "research"}},
        )
    ).json()
    assert result["doc_id"] in {h["doc_id"] for h in hits["results"]}

    random_bin = (DOCUMENTS / "random.bin").read_bytes()
    response = await api.post(
        "/api/v1/ingest/file", files={"file": ("random.bin", random_bin)}, data={"collection": "files"}
    )
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")


async def test_a_blank_form_field_is_the_same_as_leaving_it_out(api):
    """As a browser form sends an empty input, and as the OpenAPI document says (anyOf ... maxLength 0)."""
    response = await api.post(
        "/api/v1/ingest/file",
        files={"file": ("blank-fields.md", b"# Tides\n\nTwice a day.")},
        data={"collection": "", "doc_id": "", "title": ""},
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["collection"] == "default" and result["doc_id"] and result["title"]
    spec = (await api.get("/openapi.json")).json()["paths"]
    for path, field in (
        ("/api/v1/ingest/file", "collection"),
        ("/api/v1/ingest/file", "doc_id"),
        ("/api/v1/jobs/archive", "collection"),
    ):
        schema = spec[path]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"][field]
        assert {"type": "string", "maxLength": 0} in schema["anyOf"], (path, field)


async def test_convert_a_file_streams_it_to_the_converter(api):
    data = (DOCUMENTS / "test_blog.html").read_bytes()
    response = await api.post("/api/v1/convert", files={"file": ("test_blog.html", data, "text/html")})
    assert response.status_code == 200, response.text
    converted = response.json()
    assert "AutoGen" in converted["markdown"]
    assert converted["mime_type"] == "text/html"
    assert converted["size_bytes"] == len(data)
    random_bin = (DOCUMENTS / "random.bin").read_bytes()
    response = await api.post("/api/v1/convert", files={"file": ("random.bin", random_bin)})
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE")


async def test_urls_to_private_addresses_are_refused(api):
    for path, body in (
        ("/api/v1/convert", {"url": "http://127.0.0.1:9/x"}),
        ("/api/v1/ingest_url", {"url": "http://127.0.0.1:9/x", "collection": "web"}),
    ):
        error = assert_error(await api.post(path, json=body), 403, "URL_NOT_ALLOWED")
        assert error["details"]["domain"] == "converter.ragmesh"


async def test_search_rejects_what_the_search_service_refuses(api):
    error = assert_error(await api.post("/api/v1/search", json={"query": "   "}), 400, "QUERY_EMPTY")
    assert error["details"]["domain"] == "search.ragmesh"
    assert_error(
        await api.post("/api/v1/search", json={"query": "x", "collection": "never-made"}), 404, "COLLECTION_NOT_FOUND"
    )


async def test_document_ids_with_slashes_work_in_paths(api):
    body = {"text": ROCKET_TEXT, "collection": "paths", "doc_id": "docs/guide/rockets.md"}
    assert (await api.post("/api/v1/ingest", json=body)).status_code == 200
    fetched = await api.get("/api/v1/documents/docs/guide/rockets.md", params={"collection": "paths"})
    assert fetched.status_code == 200, fetched.text
    assert fetched.json()["doc_id"] == "docs/guide/rockets.md"
    deleted = await api.delete("/api/v1/documents/docs%2Fguide%2Frockets.md", params={"collection": "paths"})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"] >= 1


async def test_unknown_document_is_404(api):
    await api.post("/api/v1/ingest", json={"text": ROCKET_TEXT, "collection": "default", "doc_id": "known"})
    assert_error(await api.get("/api/v1/documents/no-such-doc"), 404, "DOCUMENT_NOT_FOUND")
    assert_error(
        await api.get("/api/v1/documents/known", params={"collection": "nowhere"}), 404, "COLLECTION_NOT_FOUND"
    )


async def test_delete_collection_needs_confirm_then_deletes(api):
    await api.post("/api/v1/ingest", json={"text": ROCKET_TEXT, "collection": "doomed", "doc_id": "r1"})
    refused = await api.delete("/api/v1/collections/doomed")
    assert_error(refused, 400, "CONFIRMATION_REQUIRED")
    listed = {c["name"]: c for c in (await api.get("/api/v1/collections")).json()["collections"]}
    assert listed["doomed"]["documents"] == 1
    assert (await api.get("/api/v1/documents/r1", params={"collection": "doomed"})).status_code == 200

    deleted = await api.delete("/api/v1/collections/doomed", params={"confirm": "true"})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["name"] == "doomed"
    assert deleted.json()["deleted"] >= 1
    names = {c["name"] for c in (await api.get("/api/v1/collections")).json()["collections"]}
    assert "doomed" not in names
    assert (await api.get("/api/v1/documents/r1", params={"collection": "doomed"})).status_code == 404


async def test_ready_when_every_service_serves(api):
    response = await api.get("/ready")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "ready",
        "services": dict.fromkeys(("converter", "embedder", "indexer", "search", "answer"), "SERVING"),
    }


async def test_one_service_down_is_named_by_ready_and_by_the_call(mesh):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{sock.getsockname()[1]}"
    settings = settings_for(mesh, search_addr=dead, gateway_ready_timeout_seconds=1.0)
    async with run_gateway(settings) as url, httpx.AsyncClient(base_url=url, timeout=60) as client:
        error = assert_error(await client.get("/ready"), 503, "SERVICES_NOT_READY")
        assert error["details"]["services"] == "search"
        error = assert_error(await client.post("/api/v1/search", json={"query": "panda"}), 503, "SERVICE_UNAVAILABLE")
        assert error["details"]["service"] == "search"
        # The rest of the mesh still works.
        ingested = await client.post("/api/v1/ingest", json={"text": ROCKET_TEXT, "doc_id": "still-works"})
        assert ingested.status_code == 200, ingested.text


async def test_api_keys_guard_the_api_but_not_health(mesh):
    async with run_gateway(settings_for(mesh, api_keys=KEY)) as url, httpx.AsyncClient(base_url=url) as client:
        assert_error(await client.get("/api/v1/collections"), 401, "API_KEY_MISSING")
        assert_error(
            await client.get("/api/v1/collections", headers={"Authorization": "Bearer nope"}), 401, "API_KEY_INVALID"
        )
        allowed = await client.get("/api/v1/collections", headers={"Authorization": f"Bearer {KEY}"})
        assert allowed.status_code == 200
        assert "collections" in allowed.json()
        assert (await client.get("/health")).status_code == 200
        assert (await client.get("/ready")).status_code == 200
