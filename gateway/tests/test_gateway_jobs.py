"""Jobs through the gateway: the REST job API (folders, texts, archives, cancel, datasources, expiry, rejects)
and the MCP tools (`ingest_folder` with progress notifications, `get_job`) with the official client over
streamable HTTP, against the in-process mesh (hash embedder, embedded store, SQLite job queue)."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.config import GatewaySettings

KEY = "jobs-key"
PY = 'import os\n\n\n\ndef __main__():\n    """_private_ __dunder__ [not markup]"""\n    return os.sep\n'


@pytest.fixture(scope="module")
async def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("gw-roots")


@pytest.fixture(scope="module")
async def mesh(mesh_factory, roots):
    return await mesh_factory(indexer={"roots": (roots,), "job_batch_size": 2})


@pytest.fixture(scope="module")
async def gateway_url(mesh):
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    async with run_gateway(GatewaySettings(http_port=0, api_keys=KEY, **addrs)) as url:
        yield url


@pytest.fixture(scope="module")
async def api(gateway_url):
    async with httpx.AsyncClient(
        base_url=gateway_url, timeout=60, headers={"Authorization": f"Bearer {KEY}"}
    ) as client:
        yield client


async def finished(api, job_id: str) -> dict:
    async with asyncio.timeout(60):
        while True:
            job = (await api.get(f"/api/v1/jobs/{job_id}")).json()
            if job["state"] in ("done", "failed", "cancelled"):
                return job
            await asyncio.sleep(0.1)


def tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "tool.py").write_text(PY)
    (root / "notes.md").write_text("# Notes\n\nSome notes about tools.\n")
    (root / ".env").write_text("SECRET=1\n")
    return root


async def test_folder_job_over_rest(api, roots):
    folder = tree(roots / "rest")
    response = await api.post("/api/v1/jobs", json={"collection": "gw-jobs", "folder": str(folder), "prune": True})
    assert response.status_code == 202, response.text
    job = await finished(api, response.json()["job_id"])
    assert (job["state"], job["total"], job["indexed"], job["failed"]) == ("done", 2, 2, 0)
    assert job["skipped_files"] == [{"path": ".env", "reason": "SECRET"}]

    document = (await api.get("/api/v1/documents/pkg/tool.py", params={"collection": "gw-jobs"})).json()
    assert document["text"] == PY and document["title"] == "pkg/tool.py"
    assert document["chunks"][0]["location"] == {
        "path": "pkg/tool.py",
        "language": "python",
        "start_line": 1,
        "end_line": 7,
    }
    hits = (
        await api.post(
            "/api/v1/search",
            json={"query": "dunder private", "collection": "gw-jobs", "filters": {"language": "python"}},
        )
    ).json()["results"]
    assert [h["doc_id"] for h in hits] == ["pkg/tool.py"] and hits[0]["location"]["language"] == "python"

    listed = (await api.get("/api/v1/jobs", params={"limit": 5})).json()["jobs"]
    assert job["job_id"] in [j["job_id"] for j in listed]
    datasources = (await api.get("/api/v1/datasources", params={"collection": "gw-jobs"})).json()["datasources"]
    assert [(d["kind"], d["folder"], d["due"]) for d in datasources] == [("folder", str(folder.resolve()), True)]
    synced = (await api.post("/api/v1/datasources/sync", json={"collection": "gw-jobs"})).json()["jobs"]
    assert (await finished(api, synced[0]["job_id"]))["unchanged"] == 2
    assert (await api.get("/api/v1/collections/gw-jobs/expired")).json() == {"documents": []}
    assert (await api.post("/api/v1/collections/gw-jobs/expired/prune")).json() == {"deleted": []}
    # DELETE of .../expired (the first API) left the path answering: pruning is a POST now.
    gone = await api.delete("/api/v1/collections/gw-jobs/expired")
    assert gone.status_code == 405 and gone.headers["allow"] == "GET"


async def test_text_and_archive_jobs_and_cancel(api):
    response = await api.post(
        "/api/v1/jobs",
        json={
            "collection": "gw-texts",
            "documents": [{"text": "alpha beta gamma", "doc_id": "a"}, {"text": " ", "doc_id": "blank"}],
        },
    )
    job = await finished(api, response.json()["job_id"])
    assert (job["indexed"], job["failed"]) == (1, 1)
    assert job["errors"][0]["document"] == "blank" and job["errors"][0]["error"]["reason"] == "EMPTY_DOCUMENT"

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("src/main.py", PY)
        archive.writestr("README.txt", "read me\n")
    response = await api.post(
        "/api/v1/jobs/archive",
        data={"collection": "gw-zip"},
        files={"file": ("code.zip", buffer.getvalue(), "application/zip")},
    )
    assert response.status_code == 202, response.text
    job = await finished(api, response.json()["job_id"])
    assert (job["kind"], job["source"], job["indexed"]) == ("archive", "code.zip", 2)
    assert (await api.get("/api/v1/documents/src/main.py", params={"collection": "gw-zip"})).json()["text"] == PY

    many = [{"text": f"document {i} " * 50} for i in range(40)]
    job_id = (await api.post("/api/v1/jobs", json={"collection": "gw-cancel", "documents": many})).json()["job_id"]
    cancelled = await api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    kept = await api.get(f"/api/v1/jobs/{job_id}")  # a cancelled job stays readable
    assert kept.status_code == 200 and kept.json()["state"] == "cancelled"
    # DELETE (the first API) cancelled yet left the job answering: cancelling is a POST now.
    gone = await api.delete(f"/api/v1/jobs/{job_id}")
    assert gone.status_code == 405 and gone.headers["allow"] == "GET"


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"collection": "x"}, 400, "REQUEST_INVALID"),
        ({"collection": "x", "urls": ["http://a"], "folder": "/"}, 400, "REQUEST_INVALID"),
        ({"collection": "x", "folder": "/etc"}, 403, "PATH_OUTSIDE_ROOTS"),
        ({"collection": "x", "folder": "missing"}, 404, "FOLDER_NOT_FOUND"),
        ({"collection": "Bad!", "urls": ["http://a"]}, 400, "COLLECTION_NAME_INVALID"),
    ],
)
async def test_job_rejects(api, body, status, reason):
    response = await api.post("/api/v1/jobs", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["reason"] == reason


async def test_unknown_job_is_404_and_keys_are_required(api, gateway_url):
    response = await api.get("/api/v1/jobs/" + "0" * 32)
    assert response.status_code == 404 and response.json()["error"]["reason"] == "JOB_NOT_FOUND"
    assert (await api.get("/api/v1/jobs/unknown")).status_code == 404  # not a job id at all
    bad_zip = await api.post("/api/v1/jobs/archive", files={"file": ("x.zip", b"nope", "application/zip")})
    assert bad_zip.status_code == 422 and bad_zip.json()["error"]["reason"] == "ARCHIVE_INVALID"
    wrong_method = await api.get("/api/v1/jobs/archive")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    async with httpx.AsyncClient(base_url=gateway_url) as anonymous:
        assert (await anonymous.get("/api/v1/jobs")).status_code == 401


async def test_mcp_ingest_folder_reports_progress_and_get_job_reads_it(gateway_url, roots):
    folder = roots / "mcp"
    for i in range(5):
        (folder / "docs").mkdir(parents=True, exist_ok=True)
        (folder / "docs" / f"page{i}.md").write_text(f"# Page {i}\n\nText of page {i}.\n")
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http,
        Client(streamable_http_client(f"{gateway_url}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool(
            "ingest_folder", {"folder": str(folder), "collection": "gw-mcp"}, progress_callback=on_progress
        )
        job = result.structured_content
        assert not result.is_error and (job["state"], job["indexed"]) == ("done", 5)
        again = (await client.call_tool("get_job", {"job_id": job["job_id"]})).structured_content
        assert again["job_id"] == job["job_id"] and again["total"] == 5
        missing = await client.call_tool("get_job", {"job_id": "nope"})
        assert missing.is_error and missing.structured_content["error"]["reason"] == "JOB_NOT_FOUND"
    assert progress and progress[-1][:2] == (5, 5) and all(message for *_, message in progress)
    assert [done for done, _, _ in progress] == sorted(done for done, _, _ in progress)


async def test_a_clients_folder_is_listed_with_its_host_and_left_to_it_by_sync(mesh, api):
    import hashlib

    from ragmesh.indexer.v1 import indexer_service_pb2 as pb

    data = b"# Far\n\nA folder on a laptop.\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("far.md", data)
    entry = pb.ManifestEntry(path="far.md", sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    upload = pb.ManifestUpload(
        manifest=pb.Manifest(host="laptop", folder="/home/me/far", entries=[entry]),
        archive=pb.Archive(data=buffer.getvalue(), filename="far"),
    )
    created = await mesh.stub("indexer").CreateJob(pb.CreateJobRequest(collection="gw-far", manifest_upload=upload))
    assert (await finished(api, created.job.job_id))["indexed"] == 1

    response = await api.get("/api/v1/datasources", params={"collection": "gw-far"})
    assert response.status_code == 200, response.text
    assert [(d["kind"], d["host"], d["folder"]) for d in response.json()["datasources"]] == [
        ("manifest", "laptop", "/home/me/far")
    ]
    synced = await api.post("/api/v1/datasources/sync", json={"collection": "gw-far", "all": True})
    assert synced.status_code == 202 and synced.json()["jobs"] == []
