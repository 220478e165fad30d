"""Folders on a client's machine over real gRPC (in-process mesh, hash embedder): PlanUpload names what to send,
a manifest upload job counts the rest unchanged, a file the client did not send fails (and is asked for again),
and every bad manifest is refused with its field, before anything is stored."""

from __future__ import annotations

import asyncio
import hashlib
import io
import zipfile

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb

pytestmark = pytest.mark.asyncio(loop_scope="session")
SHA = "0" * 64
FILES = {"a.md": b"# A\n\nThe first file.\n", "b/c.py": b"def c():\n    return 3\n"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture
def indexer(mesh):
    return mesh.stub("indexer")


def entry(path: str, data: bytes) -> pb.ManifestEntry:
    return pb.ManifestEntry(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def manifest(files: dict[str, bytes], folder: str = "/home/me/project") -> pb.Manifest:
    return pb.Manifest(host="laptop", folder=folder, entries=[entry(p, d) for p, d in files.items()])


def archive(files: dict[str, bytes]) -> pb.Archive:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return pb.Archive(data=buffer.getvalue(), filename="project")


async def run(indexer, collection: str, files: dict[str, bytes], sent: dict[str, bytes], **kw) -> pb.Job:
    upload = pb.ManifestUpload(manifest=manifest(files), archive=archive(sent))
    job = (await indexer.CreateJob(pb.CreateJobRequest(collection=collection, manifest_upload=upload, **kw))).job
    async with asyncio.timeout(60):
        while job.state not in (pb.JOB_STATE_DONE, pb.JOB_STATE_FAILED):
            await asyncio.sleep(0.1)
            job = (await indexer.GetJob(pb.GetJobRequest(job_id=job.job_id))).job
    return job


async def plan(indexer, collection: str, files: dict[str, bytes], prune: bool = True) -> pb.PlanUploadResponse:
    return await indexer.PlanUpload(pb.PlanUploadRequest(collection=collection, manifest=manifest(files), prune=prune))


async def test_plan_then_upload_only_what_changed(indexer):
    planned = await plan(indexer, "mf-plan", FILES)
    assert (list(planned.upload_paths), planned.unchanged, list(planned.delete_paths)) == (["a.md", "b/c.py"], 0, [])
    job = await run(indexer, "mf-plan", FILES, FILES, prune=True)
    assert (job.kind, job.source, job.total, job.indexed, job.unchanged) == (
        "manifest",
        "laptop:/home/me/project",
        2,
        2,
        0,
    )
    assert job.datasource_id == planned.datasource_id

    assert (await plan(indexer, "mf-plan", FILES)).upload_paths == []
    changed = {"a.md": b"# A\n\nChanged.\n"}
    planned = await plan(indexer, "mf-plan", changed)
    assert (list(planned.upload_paths), planned.unchanged, list(planned.delete_paths)) == (["a.md"], 0, ["b/c.py"])
    job = await run(indexer, "mf-plan", changed, changed, prune=True)
    assert (job.total, job.indexed, job.unchanged, job.deleted) == (1, 1, 0, 1)
    # The same folder of another host is another datasource.
    other = await indexer.PlanUpload(
        pb.PlanUploadRequest(collection="mf-plan", manifest=pb.Manifest(host="desk", folder="/home/me/project"))
    )
    assert other.datasource_id != planned.datasource_id


async def test_a_file_not_sent_fails_and_is_asked_for_again(indexer):
    job = await run(indexer, "mf-missing", FILES, {"a.md": FILES["a.md"]})
    assert (job.total, job.indexed, job.unchanged, job.failed) == (2, 1, 0, 1)
    assert [(e.document, e.error.reason) for e in job.errors] == [("b/c.py", "FILE_NOT_FOUND")]
    assert list((await plan(indexer, "mf-missing", FILES)).upload_paths) == ["b/c.py"]


def _entries(*pairs: tuple[str, str]) -> pb.Manifest:
    return pb.Manifest(host="laptop", folder="/p", entries=[pb.ManifestEntry(path=p, sha256=s) for p, s in pairs])


@pytest.mark.parametrize(
    ("given", "reason", "field"),
    [
        (pb.Manifest(host="laptop"), "MANIFEST_PATH_INVALID", "manifest.folder"),
        (_entries(("/etc/passwd", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[0].path"),
        (_entries(("a.md", SHA), ("../up.md", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[1].path"),
        (_entries(("a/./b.md", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[0].path"),
        (_entries(("a\\b.md", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[0].path"),
        (_entries(("", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[0].path"),
        (_entries(("a.md", SHA), ("a.md", SHA)), "MANIFEST_PATH_INVALID", "manifest.entries[1].path"),
        (_entries(("a.md", "abc")), "MANIFEST_HASH_INVALID", "manifest.entries[0].sha256"),
        (_entries(("a.md", SHA.upper().replace("0", "A"))), "MANIFEST_HASH_INVALID", "manifest.entries[0].sha256"),
    ],
)
async def test_a_bad_manifest_is_refused_naming_the_field(indexer, rpc_error, given, reason, field):
    error = await rpc_error(indexer.PlanUpload(pb.PlanUploadRequest(collection="mf-bad", manifest=given)))
    assert (error.code.name, error.reason) == ("INVALID_ARGUMENT", reason)
    assert [v.field for v in error.field_violations] == [field]
    # The same manifest in a job: refused with the job's field, and no job or datasource is left behind.
    jobs_before = len((await indexer.ListJobs(pb.ListJobsRequest(limit=1000))).jobs)
    upload = pb.ManifestUpload(manifest=given, archive=archive({}))
    error = await rpc_error(indexer.CreateJob(pb.CreateJobRequest(collection="mf-bad", manifest_upload=upload)))
    assert error.reason == reason
    assert [v.field for v in error.field_violations] == [field.replace("manifest", "manifest_upload.manifest", 1)]
    assert len((await indexer.ListJobs(pb.ListJobsRequest(limit=1000))).jobs) == jobs_before
    assert not (await indexer.ListDatasources(pb.ListDatasourcesRequest(collection="mf-bad"))).datasources


async def test_too_many_entries_are_refused(indexer, rpc_error):
    given = pb.Manifest(host="laptop", folder="/p")
    given.entries.extend(pb.ManifestEntry(path=f"f{i}.txt", sha256=SHA) for i in range(100_001))
    error = await rpc_error(indexer.PlanUpload(pb.PlanUploadRequest(collection="mf-bad", manifest=given)))
    assert (error.reason, [v.field for v in error.field_violations]) == ("MANIFEST_TOO_LARGE", ["manifest.entries"])


@pytest.mark.parametrize(
    "sent",
    [{"other.md": b"# Other\n"}, {"a.md": b"# A\n\nNot what the manifest says.\n"}],
    ids=["not-in-the-manifest", "another-hash"],
)
async def test_an_archive_that_does_not_match_its_manifest_is_refused(indexer, rpc_error, sent):
    upload = pb.ManifestUpload(manifest=manifest(FILES), archive=archive(sent))
    error = await rpc_error(indexer.CreateJob(pb.CreateJobRequest(collection="mf-mismatch", manifest_upload=upload)))
    assert (error.reason, [v.field for v in error.field_violations]) == (
        "MANIFEST_MISMATCH",
        ["manifest_upload.archive"],
    )
    assert not (await indexer.ListDatasources(pb.ListDatasourcesRequest(collection="mf-mismatch"))).datasources
