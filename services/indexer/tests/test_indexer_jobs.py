"""Jobs over real gRPC against the in-process mesh (hash embedder, embedded store, SQLite queue): folder jobs
with the skip rules, verbatim source files with line ranges, incremental re-syncs with prune, archives, URL
lists with failures, cancelling, datasources and expiry, and every reject path."""

from __future__ import annotations

import asyncio
import io
import os
import zipfile
from pathlib import Path

import pytest
import pytest_asyncio
from google.protobuf import struct_pb2
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_common.telemetry import setup_telemetry

DOCUMENTS = Path(__file__).resolve().parents[4] / "shared" / "documents"
pytestmark = pytest.mark.asyncio(loop_scope="session")

PY = '''"""A module: its blank lines and __dunder__ names must survive."""


import os

__all__ = ["handler"]


def handler(event):
    # __init__ style comment with _underscores_
    return os.path.join("a", event)



class Service:
    def run(self):
        return handler("x")
'''
GO = 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("hi")\n}\n'
JS = "export function add(a, b) {\n  return a + b;\n}\n"


def make_tree(root: Path) -> Path:
    files = {
        "README.md": "# Project\n\nA small project about tidal energy.\n",
        "notes/plan.txt": "Plan: measure the tides twice a day.\n",
        "src/app.py": PY,
        "src/__init__.py": "",
        "src/web/main.js": JS,
        "cmd/main.go": GO,
        ".gitignore": "*.tmp\n",
        "scratch.tmp": "ignored\n",
        "__pycache__/app.cpython-311.pyc": "\x00\x01",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "manual.docx").write_bytes((DOCUMENTS / "test.docx").read_bytes())
    pdf = (DOCUMENTS / "test.pdf").read_bytes()
    (root / "broken.pdf").write_bytes(pdf[: len(pdf) // 2])  # truncated
    (root / ".git").mkdir()
    os.mkfifo(root / ".git" / "HEAD")  # opening either FIFO would hang the walk
    os.mkfifo(root / ".env")
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("roots")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory, roots):
    return await mesh_factory(indexer={"chunk_tokens": 48, "roots": (roots,), "job_batch_size": 3})


@pytest.fixture
def indexer(mesh):
    return mesh.stub("indexer")


def converter_calls() -> float:
    """Convert calls the in-process converter has served (its own Prometheus registry)."""
    registry = setup_telemetry("converter").registry
    return sum(
        registry.get_sample_value(
            "ragmesh_grpc_server_handling_seconds_count",
            {"grpc_service": "ragmesh.converter.v1.ConverterService", "grpc_method": "Convert", "grpc_code": code},
        )
        or 0
        for code in ("OK", "INVALID_ARGUMENT")
    )


async def wait_job(indexer, job_id: str, timeout: float = 60) -> pb.Job:
    async with asyncio.timeout(timeout):
        while True:
            job = (await indexer.GetJob(pb.GetJobRequest(job_id=job_id))).job
            if job.state in (pb.JOB_STATE_DONE, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED):
                return job
            await asyncio.sleep(0.1)


async def folder_job(indexer, folder: Path, collection: str, **kw) -> pb.Job:
    created = (await indexer.CreateJob(pb.CreateJobRequest(collection=collection, folder=str(folder), **kw))).job
    assert created.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING, pb.JOB_STATE_DONE)
    return await wait_job(indexer, created.job_id)


async def test_folder_job_indexes_a_mixed_tree(mesh, indexer, roots):
    tree = make_tree(roots / "tree1")
    job = await folder_job(indexer, tree, "jobs-tree", prune=True)
    assert job.state == pb.JOB_STATE_DONE and job.kind == "folder" and job.source == str(tree.resolve())
    # README, plan, app.py, main.js, main.go, manual.docx indexed; broken.pdf failed; the rest never sent.
    assert (job.total, job.indexed, job.unchanged, job.failed) == (7, 6, 0, 1)
    assert [(e.document, e.error.reason) for e in job.errors] == [("broken.pdf", "DOCUMENT_CONVERSION_FAILED")]
    assert {(s.path, s.reason) for s in job.skipped_files} == {(".env", "SECRET"), ("src/__init__.py", "EMPTY")}
    assert job.bytes > 0 and job.started_at and job.finished_at and job.documents_per_second > 0

    # Source files come back byte for byte, titled by their path, with line ranges and their language.
    search = mesh.stub("search")
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="jobs-tree", doc_id="src/app.py"))
    assert document.text == PY and document.title == "src/app.py"
    assert len(document.chunks) > 1  # small chunks: the line ranges below span several
    lines = PY.split("\n")
    for chunk in document.chunks:
        loc = chunk.location
        assert (loc.path, loc.language) == ("src/app.py", "python")
        assert "\n".join(lines[loc.start_line - 1 : loc.end_line]).strip() == chunk.text.strip()
    assert document.chunks[-1].location.end_line == len(PY.rstrip("\n").split("\n"))
    go = await search.GetDocument(search_pb.GetDocumentRequest(collection="jobs-tree", doc_id="cmd/main.go"))
    assert go.text == GO and go.chunks[0].location.language == "go"

    async def found(filters: dict) -> set[str]:
        struct = struct_pb2.Struct()
        struct.update(filters)
        reply = await search.Search(
            search_pb.SearchRequest(query="handler main add tides", collections=["jobs-tree"], top_k=50, filters=struct)
        )
        return {r.doc_id for r in reply.results}

    assert await found({"language": "python"}) == {"src/app.py"}
    assert await found({"path_prefix": "src"}) == {"src/app.py", "src/web/main.js"}
    assert await found({"path_prefix": "src/web/", "language": "javascript"}) == {"src/web/main.js"}


async def test_resync_skips_unchanged_files_and_prunes_deleted_ones(mesh, indexer, roots):
    tree = make_tree(roots / "tree2")
    first = await folder_job(indexer, tree, "jobs-sync", prune=True)
    assert first.indexed == 6
    chunk_ids = set(mesh.store.document_chunk_ids("jobs-sync", "cmd/main.go"))

    converts = converter_calls()
    again = await folder_job(indexer, tree, "jobs-sync", prune=True)
    assert (again.indexed, again.unchanged, again.failed, again.deleted) == (0, 6, 1, 0)
    # Unchanged files are recognised by their bytes: only the broken PDF (never stored) is converted again.
    assert converter_calls() - converts == 1

    (tree / "src" / "app.py").write_text(PY + "\n# one more line\n")
    (tree / "cmd" / "main.go").unlink()
    third = await folder_job(indexer, tree, "jobs-sync", prune=True)
    assert (third.total, third.indexed, third.unchanged, third.deleted) == (6, 1, 4, 1)
    assert mesh.store.document_chunk_ids("jobs-sync", "cmd/main.go") == [] and chunk_ids
    search = mesh.stub("search")
    document = await search.GetDocument(search_pb.GetDocumentRequest(collection="jobs-sync", doc_id="src/app.py"))
    assert document.text == PY + "\n# one more line\n"

    # The folder is a datasource of the collection; syncing re-runs it (no freshness limit: always due).
    datasources = (await indexer.ListDatasources(pb.ListDatasourcesRequest(collection="jobs-sync"))).datasources
    assert [(d.kind, d.folder, d.prune, d.last_job_id, d.due) for d in datasources] == [
        ("folder", str(tree.resolve()), True, third.job_id, True)
    ]
    synced = (await indexer.SyncDatasources(pb.SyncDatasourcesRequest(collection="jobs-sync"))).jobs
    assert len(synced) == 1
    assert (await wait_job(indexer, synced[0].job_id)).unchanged == 5


async def test_fresh_until_marks_documents_expired_and_prune_removes_them(mesh, indexer, roots):
    for name in ("fresh", "stale"):
        (roots / name).mkdir()
        (roots / name / f"{name}.txt").write_text(f"{name} text\n")
    # Fresh for an hour: not due, not expired.
    assert (await folder_job(indexer, roots / "fresh", "jobs-fresh", fresh_for_seconds=3600)).indexed == 1
    fresh = (await indexer.ListDatasources(pb.ListDatasourcesRequest(collection="jobs-fresh"))).datasources[0]
    assert fresh.fresh_until and not fresh.due
    assert not (await indexer.SyncDatasources(pb.SyncDatasourcesRequest(collection="jobs-fresh"))).jobs
    # Fresh for one second: once it has passed, due, and its document is expired.
    assert (await folder_job(indexer, roots / "stale", "jobs-fresh", fresh_for_seconds=1)).indexed == 1
    stale = next(
        d
        for d in (await indexer.ListDatasources(pb.ListDatasourcesRequest(collection="jobs-fresh"))).datasources
        if d.folder.endswith("stale")
    )
    await asyncio.sleep(1.1)
    expired = (await indexer.ListExpiredDocuments(pb.ListExpiredDocumentsRequest(collection="jobs-fresh"))).documents
    assert [(d.doc_id, d.datasource_id) for d in expired] == [("stale.txt", stale.datasource_id)]
    pruned = await indexer.PruneExpiredDocuments(pb.PruneExpiredDocumentsRequest(collection="jobs-fresh"))
    assert list(pruned.doc_ids) == ["stale.txt"]
    assert mesh.store.document_chunk_ids("jobs-fresh", "stale.txt") == []
    assert mesh.store.document_chunk_ids("jobs-fresh", "fresh.txt")
    synced = (await indexer.SyncDatasources(pb.SyncDatasourcesRequest(collection="jobs-fresh"))).jobs
    assert [j.source for j in synced] == [stale.folder]  # only the stale one is due


async def test_archive_and_document_and_url_jobs(indexer):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("pkg/mod.py", "def f():\n    return 2\n")
        archive.writestr("pkg/.env", "TOKEN=x")
        archive.writestr("docs/guide.md", "# Guide\n\nRead me.\n")
    job = await wait_job(
        indexer,
        (
            await indexer.CreateJob(
                pb.CreateJobRequest(
                    collection="jobs-archive", archive=pb.Archive(data=buffer.getvalue(), filename="src.zip")
                )
            )
        ).job.job_id,
    )
    assert (job.kind, job.total, job.indexed, job.skipped) == ("archive", 2, 2, 1)
    assert [(s.path, s.reason) for s in job.skipped_files] == [("pkg/.env", "SECRET")]

    texts = pb.DocumentList(
        documents=[pb.DocumentInput(text="first text", doc_id="t1"), pb.DocumentInput(text="   ", doc_id="t2")]
    )
    job = await wait_job(
        indexer, (await indexer.CreateJob(pb.CreateJobRequest(collection="jobs-texts", documents=texts))).job.job_id
    )
    assert (job.indexed, job.failed) == (1, 1) and job.errors[0].error.reason == "EMPTY_DOCUMENT"

    # Loopback URLs are refused by the converter (SSRF): each URL fails alone, the job still finishes.
    urls = pb.UrlList(urls=["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"])
    job = await wait_job(
        indexer, (await indexer.CreateJob(pb.CreateJobRequest(collection="jobs-urls", urls=urls))).job.job_id
    )
    assert (job.state, job.total, job.failed) == (pb.JOB_STATE_DONE, 2, 2)
    assert {e.document for e in job.errors} == {"http://127.0.0.1:9/a", "http://127.0.0.1:9/b"}
    listed = (await indexer.ListJobs(pb.ListJobsRequest(limit=2))).jobs
    assert [j.job_id for j in listed][0] == job.job_id and not listed[0].errors


async def test_cancel_stops_the_remaining_documents(indexer):
    documents = pb.DocumentList(documents=[pb.DocumentInput(text=f"document number {i} " * 40) for i in range(60)])
    created = (await indexer.CreateJob(pb.CreateJobRequest(collection="jobs-cancel", documents=documents))).job
    cancelled = (await indexer.CancelJob(pb.CancelJobRequest(job_id=created.job_id))).job
    assert cancelled.state == pb.JOB_STATE_CANCELLED and cancelled.finished_at
    await asyncio.sleep(1.0)
    after = (await indexer.GetJob(pb.GetJobRequest(job_id=created.job_id))).job
    assert after.state == pb.JOB_STATE_CANCELLED
    assert after.indexed + after.failed < 60  # the batches still queued were dropped
    again = (await indexer.CancelJob(pb.CancelJobRequest(job_id=created.job_id))).job
    assert again.state == pb.JOB_STATE_CANCELLED


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (pb.CreateJobRequest(collection="x"), "JOB_SOURCE_MISSING"),
        (pb.CreateJobRequest(collection="Bad Name", folder="/"), "COLLECTION_NAME_INVALID"),
        (pb.CreateJobRequest(collection="x", folder="/etc"), "PATH_OUTSIDE_ROOTS"),
        (pb.CreateJobRequest(collection="x", folder="does-not-exist"), "FOLDER_NOT_FOUND"),
        (pb.CreateJobRequest(collection="x", archive=pb.Archive(data=b"not a zip")), "ARCHIVE_INVALID"),
        (
            pb.CreateJobRequest(collection="x", urls=pb.UrlList(urls=["http://a"]), fresh_for_seconds=-1),
            "FRESH_FOR_INVALID",
        ),
    ],
)
async def test_create_job_rejects(indexer, rpc_error, request_, reason):
    assert (await rpc_error(indexer.CreateJob(request_))).reason == reason


async def test_unknown_jobs_and_bad_limits(indexer, rpc_error):
    assert (await rpc_error(indexer.GetJob(pb.GetJobRequest(job_id="nope")))).reason == "JOB_NOT_FOUND"
    assert (await rpc_error(indexer.CancelJob(pb.CancelJobRequest(job_id="")))).reason == "JOB_ID_INVALID"
    assert (await rpc_error(indexer.ListJobs(pb.ListJobsRequest(limit=5000)))).reason == "LIMIT_OUT_OF_RANGE"


async def test_folder_jobs_need_roots(mesh_factory, tmp_path, rpc_error):
    mesh = await mesh_factory()
    error = await rpc_error(mesh.stub("indexer").CreateJob(pb.CreateJobRequest(collection="x", folder=str(tmp_path))))
    assert error.reason == "LOCAL_PATHS_DISABLED" and "RAGMESH_INDEXER_ROOTS" in error.message
