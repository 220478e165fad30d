"""Bulk ingestion against the real mesh as real processes.

- `ragmesh up` with the real model: a generated folder of mixed documents plus a small source tree in three
  languages, driven through the REST job API, the CLI (`ragmesh index`) and MCP: counts, a broken file
  reported while the rest is indexed, byte-exact `.py` files with line ranges, `language` filters, a re-sync
  that re-embeds only the changed file (the embedder's own Prometheus counter), a deleted file pruned from
  search, `.env` and `.git` never read (they are FIFOs: opening one would hang the walk).
- `kill -9` mid-job, then a restart: the job finishes and every document is stored exactly once — with the
  embedded queue (`ragmesh up` is the indexer's process) and with Redis Streams (`ragmesh serve indexer
  search` killed apart from the gateway).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .mesh_process import RAGMESH, Mesh, Proc, free_port, wait_ready

DOCUMENTS = Path(__file__).resolve().parents[3] / "shared" / "documents"
REDIS_URL = os.environ.get("RAGMESH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

PY_FILES = {
    "app/__init__.py": "",
    "app/server.py": '"""The server: __dunder__ names and _underscores_ stay as they are."""\n\n\nimport os\n\n'
    'PORT = int(os.environ.get("PORT", "8080"))\n\n\n\ndef serve(handler):\n'
    '    """Serve requests with [handler] until stopped."""\n    while True:\n'
    "        handler()\n",
    "app/models.py": "from dataclasses import dataclass\n\n\n@dataclass\nclass Invoice:\n    number: str\n"
    "    total_cents: int\n\n    def euros(self) -> float:\n        return self.total_cents / 100\n",
}
OTHER_FILES = {
    "web/cart.ts": "export function cartTotal(items: number[]): number {\n"
    "  return items.reduce((a, b) => a + b, 0);\n}\n",
    "cmd/report/main.go": 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("quarterly report")\n}\n',
    "docs/guide.md": "# Operator guide\n\nRestart the billing service when invoices stall.\n\n## Backups\n\nNightly.\n",
    "docs/notes.txt": "Meeting notes: the glacier survey moves to Tuesday.\n",
}


def make_tree(root: Path) -> Path:
    for rel, text in {**PY_FILES, **OTHER_FILES}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in ("test.epub", "test_blog.html", "movie-theater-booking-2024.pdf"):
        (root / "docs" / name).write_bytes((DOCUMENTS / name).read_bytes())
    pdf = (DOCUMENTS / "test.pdf").read_bytes()
    (root / "docs" / "broken.pdf").write_bytes(pdf[: len(pdf) // 2])
    (root / "app" / "__pycache__").mkdir()
    (root / "app" / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"\x00compiled")
    (root / ".git").mkdir()
    os.mkfifo(root / ".git" / "config")
    os.mkfifo(root / ".env")
    (root / ".gitignore").write_text("*.log\n")
    (root / "debug.log").write_text("ignored\n")
    return root


def embedded_texts(metrics_port: int) -> float:
    """The embedder's ragmesh_embedder_texts_total, scraped from its /metrics endpoint."""
    body = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in body.splitlines() if line.startswith("ragmesh_embedder_texts_total"))


def finished(http: httpx.Client, job_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not finished after {timeout}s: {job}")


@pytest.fixture(scope="module")
def up(tmp_path_factory):
    """`ragmesh up` with the real model, its indexer allowed to read the generated trees."""
    roots = tmp_path_factory.mktemp("roots")
    metrics_port = free_port()
    mesh = Mesh(
        tmp_path_factory.mktemp("data"),
        extra_env={
            "RAGMESH_INDEXER_ROOTS": str(roots),
            "RAGMESH_EMBEDDER_METRICS_PORT": str(metrics_port),
            "RAGMESH_INDEXER_METRICS_PORT": "0",
            "RAGMESH_SEARCH_METRICS_PORT": "0",
            "RAGMESH_CONVERTER_METRICS_PORT": "0",
        },
    )
    proc = Proc(["up"], mesh.env(), tmp_path_factory.mktemp("logs") / "up.log").start()
    try:
        wait_ready(mesh.url, [proc])
        yield mesh, roots, metrics_port
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-3000:]


def test_folder_jobs_through_rest_cli_and_search(up):
    mesh, roots, metrics_port = up
    tree = make_tree(roots / "repo")
    with httpx.Client(base_url=mesh.url, timeout=120) as http:
        accepted = http.post("/api/v1/jobs", json={"collection": "repo", "folder": str(tree), "prune": True})
        assert accepted.status_code == 202, accepted.text
        job = finished(http, accepted.json()["job_id"])
        # 2 .py (the empty __init__ is skipped quietly), .ts, .go, .md, .txt, epub, html, pdf; broken.pdf fails.
        assert (job["state"], job["total"], job["indexed"], job["failed"]) == ("done", 10, 9, 1), job
        assert [(e["document"], e["error"]["reason"]) for e in job["errors"]] == [
            ("docs/broken.pdf", "DOCUMENT_CONVERSION_FAILED")
        ]
        assert {(s["path"], s["reason"]) for s in job["skipped_files"]} == {
            (".env", "SECRET"),
            ("app/__init__.py", "EMPTY"),
        }
        assert job["bytes"] > 0 and job["documents_per_second"] > 0

        for rel, text in PY_FILES.items():
            if not text:
                continue
            document = http.get(f"/api/v1/documents/{rel}", params={"collection": "repo"}).json()
            assert document["text"] == text and document["title"] == rel  # byte for byte
            assert document["chunks"][0]["location"]["start_line"] == 1
            assert document["chunks"][-1]["location"]["end_line"] == text.count("\n")
            assert {c["location"]["language"] for c in document["chunks"]} == {"python"}

        def search(query: str, **filters) -> list[str]:
            body = {"query": query, "collection": "repo", "top_k": 20, "filters": filters}
            return [h["doc_id"] for h in http.post("/api/v1/search", json=body).json()["results"]]

        assert set(search("invoice total in euros", language="python")) <= set(PY_FILES)
        assert search("invoice total in euros", language="python")[0] == "app/models.py"
        assert "cmd/report/main.go" in search("quarterly report", language="go")
        assert set(search("cart total", path_prefix="web")) == {"web/cart.ts"}

        # Re-sync with the CLI after changing one file and deleting another: only the changed file is embedded.
        (tree / "app" / "models.py").write_text(PY_FILES["app/models.py"] + "\n\ndef audit():\n    return []\n")
        (tree / "docs" / "notes.txt").unlink()
        before = embedded_texts(metrics_port)
        cli = subprocess.run(
            [RAGMESH, "index", str(tree), "-c", "repo", "--prune"],
            env=mesh.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert cli.returncode == 1, cli.stderr  # broken.pdf still fails
        chunks = len(http.get("/api/v1/documents/app/models.py", params={"collection": "repo"}).json()["chunks"])
        assert embedded_texts(metrics_port) - before == chunks  # the changed file's chunks, nothing else
        assert "docs/broken.pdf: DOCUMENT_CONVERSION_FAILED" in cli.stderr and "skipped .env: SECRET" in cli.stderr
        last = http.get("/api/v1/jobs", params={"limit": 1}).json()["jobs"][0]
        assert (last["indexed"], last["unchanged"], last["failed"], last["deleted"]) == (1, 7, 1, 1), last
        assert "docs/notes.txt" not in search("glacier survey meeting notes")
        assert http.get("/api/v1/documents/docs/notes.txt", params={"collection": "repo"}).status_code == 404

    # MCP over streamable HTTP: a folder job with progress, get_job, and a language filter.
    job, progress, hits = asyncio.run(mcp_session(mesh.url, tree / "app"))
    assert (job["state"], job["indexed"]) == ("done", 2) and progress[-1][:2] == (2, 2)
    assert hits and {h["doc_id"] for h in hits} <= {"server.py", "models.py"}


async def mcp_session(url: str, folder: Path) -> tuple[dict, list, list]:
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with (
        httpx2.AsyncClient(timeout=120) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        done = (
            await client.call_tool(
                "ingest_folder", {"folder": str(folder), "collection": "repo-mcp"}, progress_callback=on_progress
            )
        ).structured_content
        job = (await client.call_tool("get_job", {"job_id": done["job_id"]})).structured_content
        found = (
            await client.call_tool(
                "search", {"query": "invoice", "collection": "repo-mcp", "filters": {"language": "python"}}
            )
        ).structured_content
    return job, progress, found["results"]


def kill_hard(proc: Proc) -> None:
    os.killpg(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait(30)


def wait_partly_done(http: httpx.Client, job_id: str, total: int) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        handled = job["indexed"] + job["unchanged"] + job["failed"]
        if handled >= total // 10:
            assert handled < total, "the job finished before it could be interrupted"
            return job
        time.sleep(0.02)
    raise AssertionError("the job did not start")


def assert_stored_once(http: httpx.Client, collection: str, doc_ids: list[str]) -> None:
    """Every document is there, its chunks numbered 0..n-1 once; the collection holds nothing else."""
    total_chunks = 0
    for doc_id in doc_ids:
        document = http.get(f"/api/v1/documents/{doc_id}", params={"collection": collection}).json()
        assert [c["chunk_index"] for c in document["chunks"]] == list(range(len(document["chunks"]))), doc_id
        total_chunks += len(document["chunks"])
    stats = {c["name"]: c for c in http.get("/api/v1/collections").json()["collections"]}[collection]
    assert (stats["documents"], stats["chunks"]) == (len(doc_ids), total_chunks)


DOCS = [
    {"doc_id": f"doc-{i:04d}", "text": f"Document {i} about topic {i % 17}. " + "Filler sentence. " * 300}
    for i in range(240)
]


def test_job_survives_kill_9_with_the_embedded_queue(tmp_path):
    mesh = Mesh(
        tmp_path / "data",
        extra_env={
            "RAGMESH_EMBEDDER_BACKEND": "hash",
            "RAGMESH_INDEXER_JOB_BATCH_SIZE": "4",
            "RAGMESH_INDEXER_JOB_WORKERS": "1",
        },
    )
    proc = Proc(["up"], mesh.env(), tmp_path / "up.log").start()
    try:
        wait_ready(mesh.url, [proc])
        with httpx.Client(base_url=mesh.url, timeout=120) as http:
            job_id = http.post("/api/v1/jobs", json={"collection": "crash", "documents": DOCS}).json()["job_id"]
            wait_partly_done(http, job_id, len(DOCS))
            kill_hard(proc)
            proc = Proc(["up"], mesh.env(), tmp_path / "up2.log").start()
            wait_ready(mesh.url, [proc])
            job = finished(http, job_id)
            assert (job["state"], job["indexed"] + job["unchanged"], job["failed"]) == ("done", len(DOCS), 0), job
            assert_stored_once(http, "crash", [d["doc_id"] for d in DOCS])
    finally:
        proc.stop()


def test_job_survives_kill_9_of_the_indexer_with_redis(tmp_path):
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {REDIS_URL} (set RAGMESH_TEST_REDIS_URL)")
    prefix = f"ragmesh-e2e-{uuid.uuid4().hex[:8]}:"
    mesh = Mesh(
        tmp_path / "data",
        extra_env={
            "RAGMESH_EMBEDDER_BACKEND": "hash",
            "RAGMESH_REDIS_URL": REDIS_URL,
            "RAGMESH_INDEXER_REDIS_PREFIX": prefix,
            "RAGMESH_INDEXER_JOB_BATCH_SIZE": "4",
            "RAGMESH_INDEXER_JOB_WORKERS": "1",
            "RAGMESH_INDEXER_JOB_CLAIM_IDLE_SECONDS": "2",
        },
    )
    front = Proc(["serve", "converter", "embedder", "answer", "gateway"], mesh.env(), tmp_path / "front.log").start()
    back = Proc(["serve", "indexer", "search"], mesh.env(), tmp_path / "back.log").start()
    try:
        wait_ready(mesh.url, [front, back])
        with httpx.Client(base_url=mesh.url, timeout=120) as http:
            job_id = http.post("/api/v1/jobs", json={"collection": "crash", "documents": DOCS}).json()["job_id"]
            wait_partly_done(http, job_id, len(DOCS))
            kill_hard(back)
            back = Proc(["serve", "indexer", "search"], mesh.env(), tmp_path / "back2.log").start()
            wait_ready(mesh.url, [front, back])
            job = finished(http, job_id)
            assert (job["state"], job["indexed"] + job["unchanged"], job["failed"]) == ("done", len(DOCS), 0), job
            assert_stored_once(http, "crash", [d["doc_id"] for d in DOCS])
        # Every batch acknowledged and removed. The killed indexer may have recorded a batch's results (so the job
        # could finish) without acknowledging it: that batch waits in the group until it has been idle for the
        # claim time (2 s here), and is then claimed and dropped, its job being done.
        deadline = time.monotonic() + 30
        while client.xlen(f"{prefix}jobs:queue") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.xlen(f"{prefix}jobs:queue") == 0
    finally:
        back.stop()
        front.stop()
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()
