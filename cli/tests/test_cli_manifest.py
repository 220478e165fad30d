"""`ragmesh index` of a folder the indexer may not read (outside its roots: as for a mesh on another machine),
against a real in-process mesh: the CLI says it sends the folder from here, uploads only new and changed files
(a manifest of SHA-256 hashes first), and the job has the counts, datasource and prune of a folder job; `ragmesh
sync` redoes it from here, and names the machine to sync a folder of another host on."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import socket
import zipfile

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_cli.app import app
from typer.testing import CliRunner

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("manifest-roots")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory, roots):
    return await mesh_factory(indexer={"roots": (roots,)})


async def invoke(args: list[str]):
    return await asyncio.to_thread(CliRunner().invoke, app, args, env={"COLUMNS": "250"})


def row(stdout: str) -> list[str]:
    """The cells of the summary table's last job row: job, collection, state, total, indexed, unchanged, failed,
    skipped, deleted, ..."""
    rows = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line) if c.strip()]
        if cells and re.fullmatch(r"[0-9a-f]{32}", cells[0]):
            rows.append(cells)
    assert rows, f"no job row in:\n{stdout}"
    return rows[-1]


def make_project(folder):
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("def main():\n    return 42\n")
    (folder / "README.md").write_text("# Project\n\nTidal energy, measured twice a day.\n")
    (folder / "notes.txt").write_text("Plan: measure the tides.\n")
    (folder / ".env").write_text("TOKEN=1\n")
    (folder / ".gitignore").write_text("*.tmp\n")
    (folder / "scratch.tmp").write_text("ignored\n")


async def test_a_folder_outside_the_roots_is_sent_from_here(mesh, roots, tmp_path):
    folder = tmp_path / "project"
    make_project(folder)
    indexer = ["--indexer", mesh.addrs["indexer"]]

    first = await invoke(["index", str(folder), "-c", "cli-manifest", "--prune", *indexer])
    assert first.exit_code == 0, first.output
    assert "the indexer cannot read" in first.stderr and "PATH_OUTSIDE_ROOTS" in first.stderr
    assert "3 files: 3 to upload, 0 unchanged, 0 gone (pruned)" in first.stderr
    assert "skipped .env: SECRET" in first.stderr
    # job, collection, state, total, indexed, unchanged, failed, skipped, deleted
    assert row(first.stdout)[1:9] == ["cli-manifest", "done", "3", "3", "0", "0", "1", "0"]
    assert mesh.store.document_chunk_ids("cli-manifest", "src/main.py")
    assert not mesh.store.document_chunk_ids("cli-manifest", "scratch.tmp")

    # The same folder in the indexer's roots, as a folder job: the same counts.
    local = roots / "project"
    make_project(local)
    there = await invoke(["index", str(local), "-c", "cli-manifest-local", "--prune", *indexer])
    assert there.exit_code == 0, there.output
    assert row(there.stdout)[2:9] == row(first.stdout)[2:9]

    again = await invoke(["index", str(folder), "-c", "cli-manifest", "--prune", *indexer])
    assert again.exit_code == 0, again.output
    assert "3 files: 0 to upload, 3 unchanged, 0 gone" in again.stderr
    assert row(again.stdout)[1:9] == ["cli-manifest", "done", "3", "0", "3", "0", "1", "0"]

    (folder / "src" / "main.py").write_text("def main():\n    return 43\n")
    changed = await invoke(["index", str(folder), "-c", "cli-manifest", "--prune", *indexer])
    assert "3 files: 1 to upload, 2 unchanged, 0 gone" in changed.stderr
    assert row(changed.stdout)[1:9] == ["cli-manifest", "done", "3", "1", "2", "0", "1", "0"]

    (folder / "notes.txt").unlink()
    pruned = await invoke(["index", str(folder), "-c", "cli-manifest", "--prune", *indexer])
    assert "2 files: 0 to upload, 2 unchanged, 1 gone (pruned)" in pruned.stderr
    assert row(pruned.stdout)[1:9] == ["cli-manifest", "done", "2", "0", "2", "0", "1", "1"]
    assert not mesh.store.document_chunk_ids("cli-manifest", "notes.txt")

    datasources = (
        await mesh.stub("indexer").ListDatasources(pb.ListDatasourcesRequest(collection="cli-manifest"))
    ).datasources
    assert [(d.kind, d.host, d.folder, d.prune) for d in datasources] == [
        ("manifest", socket.gethostname(), str(folder), True)
    ]
    assert datasources[0].last_job_id == row(pruned.stdout)[0]

    (folder / "docs.md").write_text("# Docs\n\nHow to read the tide tables.\n")
    synced = await invoke(["sync", "-c", "cli-manifest", "--all", *indexer])
    assert synced.exit_code == 0, synced.output
    assert f"cli-manifest: sending {folder} from here" in synced.stderr
    assert "3 files: 1 to upload, 2 unchanged" in synced.stderr
    assert row(synced.stdout)[1:9] == ["cli-manifest", "done", "3", "1", "2", "0", "1", "0"]
    assert mesh.store.document_chunk_ids("cli-manifest", "docs.md")


async def test_no_upload_keeps_the_indexers_refusal(mesh, tmp_path):
    result = await invoke(["index", str(tmp_path), "--no-upload", "--indexer", mesh.addrs["indexer"]])
    assert result.exit_code == 1 and "PATH_OUTSIDE_ROOTS" in result.stderr


async def test_upload_sends_a_folder_the_indexer_could_read(mesh, roots):
    folder = roots / "readable"
    (folder / "lib").mkdir(parents=True)
    (folder / "lib" / "util.go").write_text("package lib\n\nfunc Util() int { return 1 }\n")
    (folder / "id_rsa").write_text("-----BEGIN KEY-----\n")
    result = await invoke(["index", str(folder), "-c", "cli-upload", "--upload", "--indexer", mesh.addrs["indexer"]])
    assert result.exit_code == 0, result.output
    assert "the indexer cannot read" not in result.stderr
    assert row(result.stdout)[1:8] == ["cli-upload", "done", "1", "1", "0", "0", "1"]
    assert "skipped id_rsa: SECRET" in result.stderr
    [datasource] = (
        await mesh.stub("indexer").ListDatasources(pb.ListDatasourcesRequest(collection="cli-upload"))
    ).datasources
    assert datasource.kind == "manifest" and datasource.folder == str(folder)


async def test_sync_names_the_host_of_a_folder_elsewhere(mesh):
    data = b"# Far\n\nA folder on another machine.\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("far.md", data)
    manifest = pb.Manifest(
        host="build-42",
        folder="/home/ci/far",
        entries=[pb.ManifestEntry(path="far.md", sha256=hashlib.sha256(data).hexdigest(), size=len(data))],
    )
    upload = pb.ManifestUpload(manifest=manifest, archive=pb.Archive(data=buffer.getvalue(), filename="far"))
    await mesh.stub("indexer").CreateJob(pb.CreateJobRequest(collection="cli-far", manifest_upload=upload))

    result = await invoke(["sync", "-c", "cli-far", "--all", "--indexer", mesh.addrs["indexer"]])
    assert result.exit_code == 0, result.output
    assert "build-42:/home/ci/far is a folder of build-42; run `ragmesh sync`" in result.stderr
    assert "nothing to sync" in result.stderr


async def test_more_than_one_archive_goes_as_parts_then_the_whole_manifest(mesh, tmp_path, monkeypatch):
    from ragmesh_cli import manifests

    monkeypatch.setattr(manifests, "UPLOAD_ARCHIVE_BYTES", 60)  # each file below is an archive of its own
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nThe file called {name}, long enough.\n")
    indexer = ["--indexer", mesh.addrs["indexer"]]
    first = await invoke(["index", str(tmp_path), "-c", "cli-parts", "--prune", *indexer])
    assert first.exit_code == 0, first.output
    rows = [r for r in (row(line) for line in first.stdout.splitlines() if re.match(r".*[0-9a-f]{32}", line))]
    # two partial jobs of one file each, then the whole manifest: the third file indexed, two unchanged
    assert [r[3:9] for r in rows] == [
        ["1", "1", "0", "0", "0", "0"],
        ["1", "1", "0", "0", "0", "0"],
        ["3", "1", "2", "0", "0", "0"],
    ]
    again = await invoke(["index", str(tmp_path), "-c", "cli-parts", "--prune", *indexer])
    assert "3 files: 0 to upload, 3 unchanged" in again.stderr
    assert row(again.stdout)[3:9] == ["3", "0", "3", "0", "0", "0"]
