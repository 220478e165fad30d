"""`ragmesh up` as a real process with the real model: files in, search results and whole documents out,
every reject path a 4xx with a reason, every service answering gRPC health and reflection."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from .mesh_process import RAGMESH, Mesh, Proc, wait_ready

DOCUMENTS = Path(__file__).resolve().parents[3] / "shared" / "documents"
pytestmark = pytest.mark.skipif(not DOCUMENTS.is_dir(), reason=f"shared documents not found at {DOCUMENTS}")

SERVICE_NAMES = {
    "converter": "ragmesh.converter.v1.ConverterService",
    "embedder": "ragmesh.embedder.v1.EmbedderService",
    "indexer": "ragmesh.indexer.v1.IndexerService",
    "search": "ragmesh.search.v1.SearchService",
    "answer": "ragmesh.answer.v1.AnswerService",
}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    mesh = Mesh(tmp_path_factory.mktemp("data"), extra_env={"RAGMESH_MAX_UPLOAD_BYTES": str(2 * 1024 * 1024)})
    proc = Proc(["up"], mesh.env(), tmp_path_factory.mktemp("logs") / "up.log").start()
    try:
        wait_ready(mesh.url, [proc])
        yield mesh
    finally:
        code = proc.stop()
        log = proc.log()
    assert code == 0, f"ragmesh up did not shut down cleanly (exit {code}):\n{log[-3000:]}"


@pytest.fixture(scope="module")
def http(mesh):
    with httpx.Client(base_url=mesh.url, timeout=300) as client:
        yield client


def _upload(http: httpx.Client, name: str, collection: str = "e2e", **form) -> httpx.Response:
    data = (DOCUMENTS / name).read_bytes()
    return http.post("/api/v1/ingest/file", files={"file": (name, data)}, data={"collection": collection, **form})


def _assert_error(response: httpx.Response, status: int, reason: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()["error"]
    assert body["reason"] == reason, body
    assert body["message"] and body["code"]
    return body


def test_uploaded_file_is_found_by_search_and_returned_whole(http):
    response = _upload(http, "test.docx")
    assert response.status_code == 200, response.text
    ingested = response.json()
    assert ingested["status"] == "indexed" and ingested["chunks"] >= 1
    assert "wordprocessingml" in ingested["mime_type"]
    doc_id = ingested["doc_id"]

    # A phrase from the document, asked in other words, finds it in every mode.
    for mode in ("hybrid", "dense", "sparse"):
        found = http.post(
            "/api/v1/search",
            json={"query": "AutoGen multi-agent conversation framework", "collection": "e2e", "mode": mode, "top_k": 3},
        )
        assert found.status_code == 200, found.text
        results = found.json()["results"]
        assert results and results[0]["doc_id"] == doc_id, (mode, results)
        assert found.json()["took_ms"] >= 0

    whole = http.get(f"/api/v1/documents/{doc_id}", params={"collection": "e2e"})
    assert whole.status_code == 200, whole.text
    body = whole.json()
    assert [c["chunk_index"] for c in body["chunks"]] == list(range(ingested["chunks"]))
    assert "AutoGen" in body["text"] and len(body["text"]) > 1000

    again = _upload(http, "test.docx")
    assert again.json()["status"] == "unchanged" and again.json()["doc_id"] == doc_id


def test_ask_answers_extractively_with_the_real_model_and_no_keys(http):
    # A fresh machine: no chat model configured, so the answer is the documents' own sentences, ranked against
    # the question by the real embedding model, each citing its source.
    for name in ("test.docx", "test.pptx"):
        assert _upload(http, name, collection="ask").status_code == 200
    response = http.post("/api/v1/ask", json={"query": "What is AutoGen?", "collection": "ask"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["generator"] == "extractive" and body["model"] == ""
    definition = (
        "AutoGen is an open-source framework that allows developers to build LLM applications via multiple "
        "agents that can converse with each other to accomplish tasks"
    )
    quoted = re.search(re.escape(definition) + r" \[(\d+)\]\.", body["answer"])
    assert quoted, body["answer"]
    # Cited by the number of a source whose retrieved chunk holds the sentence.
    number = int(quoted.group(1))
    assert number in {c["source"] for c in body["matched_chunks"] if definition in c["text"]}
    cited = next(s for s in body["sources"] if s["number"] == number)
    assert cited["cited"] and cited["filename"] in ("test.docx", "test.pptx")
    sentences = [s for s in body["answer"].split("].") if s.strip()]
    assert 1 <= len(sentences) <= 3 and all(re.search(r"\[\d+$", s.strip()) for s in sentences), body["answer"]
    assert body["sources"][0]["cited"] and all(0 < c["relevance_score"] <= 1 for c in body["matched_chunks"])
    # Nothing in these documents is about baking: NO_RESULTS, not a made-up answer.
    _assert_error(
        http.post("/api/v1/ask", json={"query": "How do I bake sourdough bread?", "collection": "ask"}),
        404,
        "NO_RESULTS",
    )


@pytest.mark.parametrize("name", sorted(p.name for p in DOCUMENTS.iterdir()) if DOCUMENTS.is_dir() else [])
def test_every_real_file_indexes_or_gets_a_4xx_with_a_reason(http, name):
    response = _upload(http, name, collection="all-files")
    if response.status_code == 200:
        assert response.json()["chunks"] >= 1
    else:
        assert 400 <= response.status_code < 500, response.text
        assert response.json()["error"]["reason"]


def test_not_a_document_is_415(http):
    _assert_error(_upload(http, "random.bin"), 415, "UNSUPPORTED_MEDIA_TYPE")


def test_oversized_upload_is_413(http):
    big = b"a" * (3 * 1024 * 1024)
    response = http.post("/api/v1/ingest/file", files={"file": ("big.txt", big)}, data={"collection": "e2e"})
    _assert_error(response, 413, "PAYLOAD_TOO_LARGE")


def test_bad_collection_name_is_400(http):
    response = http.post("/api/v1/ingest", json={"text": "hello", "collection": "Bad Name!"})
    _assert_error(response, 400, "COLLECTION_NAME_INVALID")
    response = http.post("/api/v1/search", json={"query": "hello", "collection": "../etc"})
    _assert_error(response, 400, "COLLECTION_NAME_INVALID")


def test_empty_query_is_400(http):
    response = http.post("/api/v1/search", json={"query": "   ", "collection": "e2e"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "INVALID_ARGUMENT"


def test_unknown_document_is_404(http):
    _assert_error(http.get("/api/v1/documents/no-such-doc", params={"collection": "e2e"}), 404, "DOCUMENT_NOT_FOUND")


def test_text_ingest_then_delete(http):
    text = "The quokka is a small marsupial living on Rottnest Island near Perth."
    response = http.post(
        "/api/v1/ingest",
        json={"text": text, "collection": "notes", "doc_id": "quokka", "title": "Quokka", "metadata": {"lang": "en"}},
    )
    assert response.status_code == 200, response.text
    found = http.post(
        "/api/v1/search", json={"query": "marsupial on an island", "collection": "notes", "filters": {"lang": "en"}}
    ).json()["results"]
    assert found[0]["doc_id"] == "quokka" and found[0]["metadata"] == {"lang": "en"}
    collections = {c["name"]: c for c in http.get("/api/v1/collections").json()["collections"]}
    assert collections["notes"]["documents"] == 1
    assert http.delete("/api/v1/documents/quokka", params={"collection": "notes"}).json()["deleted"] >= 1
    assert http.get("/api/v1/documents/quokka", params={"collection": "notes"}).status_code == 404


def test_every_service_answers_health_and_reflection(mesh):
    for name, full_name in SERVICE_NAMES.items():
        with grpc.insecure_channel(f"127.0.0.1:{mesh.ports[name]}") as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=full_name), timeout=5
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, name
            services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
            assert full_name in services and "grpc.health.v1.Health" in services, (name, services)


def test_openapi_lists_the_api(http):
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/ingest", "/api/v1/ingest/file", "/api/v1/search", "/api/v1/collections"):
        assert path in paths, json.dumps(sorted(paths))


def _cli(mesh: Mesh, *args: str) -> subprocess.CompletedProcess:
    env = mesh.env() | {"COLUMNS": "200"}
    return subprocess.run([RAGMESH, *args], env=env, capture_output=True, text=True, timeout=300)


def test_cli_ingests_a_folder_and_searches(mesh, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("test.epub", "test_notebook.ipynb", "random.bin"):
        (folder / name).write_bytes((DOCUMENTS / name).read_bytes())
    result = _cli(mesh, "ingest", str(folder), "--collection", "cli")
    # random.bin is a binary: skipped with its reason, never sent; the two documents are indexed.
    assert result.returncode == 0, result.stdout + result.stderr
    assert "skipped random.bin: BINARY" in result.stderr, result.stderr
    assert "2 indexed, 0 unchanged, 0 failed" in result.stderr, result.stderr
    found = _cli(mesh, "search", "print markitdown code cell", "--collection", "cli", "--top-k", "1")
    assert found.returncode == 0, found.stderr
    assert "Test Notebook Title" in found.stdout, found.stdout  # the best chunk is the notebook's


def test_bad_configuration_stops_start_up_with_the_variable_named(tmp_path):
    env = Mesh(tmp_path / "data").env() | {"RAGMESH_HTTP_PORT": "not-a-port"}
    result = subprocess.run([RAGMESH, "up"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "RAGMESH_HTTP_PORT" in result.stderr + result.stdout
