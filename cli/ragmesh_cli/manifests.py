"""A folder on this machine indexed by an indexer that cannot read it (another machine, or outside its roots): the
folder is walked here with the folder rules (ragmesh_common.walk: ignore files, default skips, secrets never
read), its manifest (path -> SHA-256 and size) goes to `PlanUpload`, and only the files the indexer asks for are
sent, in ZIP archives of at most UPLOAD_ARCHIVE_BYTES, as a `manifest_upload` job: the same counts, datasource
(kind "manifest", this host and folder) and prune as a folder job, and `ragmesh sync` redoes it from here."""

from __future__ import annotations

import asyncio
import hashlib
import io
import socket
import zipfile
from collections.abc import Sequence
from pathlib import Path

from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_common.clients import ServiceClient
from ragmesh_common.walk import WalkedFile, size_groups, walk

from .console import err
from .indexer_jobs import follow

# Uploads go as ZIP archives of at most this many bytes of files each (one gRPC message holds one).
UPLOAD_ARCHIVE_BYTES = 32 * 1024 * 1024
# Files larger than this are skipped (TOO_LARGE) by the walk.
MAX_FILE_BYTES = 32 * 1024 * 1024


def host() -> str:
    return socket.gethostname()


def _hash(files: Sequence[WalkedFile]) -> dict[str, pb.ManifestEntry]:
    entries = {}
    for f in files:
        digest = hashlib.sha256()
        with f.path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        entries[f.rel] = pb.ManifestEntry(path=f.rel, sha256=digest.hexdigest(), size=f.size)
    return entries


def _archive(files: Sequence[WalkedFile], entries: dict[str, pb.ManifestEntry]) -> bytes:
    """The files zipped from the bytes read now; each entry takes the hash of those bytes (a file changed since
    it was hashed is sent as it is now, and its manifest entry says so)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            data = f.path.read_bytes()
            entries[f.rel] = pb.ManifestEntry(path=f.rel, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
            archive.writestr(f.rel, data)
    return buffer.getvalue()


async def upload(
    client: ServiceClient, path: Path, collection: str, *, prune: bool, fresh_for: int, watch: bool = True
) -> list[pb.Job]:
    """Walk, plan, upload what the indexer asks for; the jobs (a folder of more than one archive's worth of new
    files is sent as parts, each finished before the next, then the whole manifest with the last part)."""
    walked = await asyncio.to_thread(walk, path, max_bytes=MAX_FILE_BYTES)
    for skipped in walked.skipped:
        if not skipped.quiet:
            err.print(f"- skipped {skipped.rel}: {skipped.reason}", style="yellow", soft_wrap=True)
    entries = await asyncio.to_thread(_hash, walked.files)
    this_host = host()

    def manifest(rels: Sequence[str]) -> pb.Manifest:
        return pb.Manifest(host=this_host, folder=str(path), entries=[entries[r] for r in rels])

    planned = await client.call(
        "PlanUpload",
        pb.PlanUploadRequest(collection=collection, manifest=manifest(list(entries)), prune=prune),
    )
    err.print(
        f"{len(entries)} files: {len(planned.upload_paths)} to upload, {planned.unchanged} unchanged"
        + (f", {len(planned.delete_paths)} gone (pruned)" if prune else ""),
        soft_wrap=True,
    )
    wanted = set(planned.upload_paths)
    groups = size_groups([f for f in walked.files if f.rel in wanted], UPLOAD_ARCHIVE_BYTES) or [[]]
    skipped_files = [pb.SkippedFile(path=s.rel, reason=s.reason) for s in walked.skipped]
    jobs = []
    for part in groups[:-1]:
        data = await asyncio.to_thread(_archive, part, entries)
        request = pb.CreateJobRequest(
            collection=collection,
            manifest_upload=pb.ManifestUpload(
                manifest=manifest([f.rel for f in part]),
                archive=pb.Archive(data=data, filename=path.name),
                partial=True,
            ),
            fresh_for_seconds=fresh_for,
        )
        jobs += await follow(client, [(await client.call("CreateJob", request)).job], watch=True)
    data = await asyncio.to_thread(_archive, groups[-1], entries)
    request = pb.CreateJobRequest(
        collection=collection,
        manifest_upload=pb.ManifestUpload(
            manifest=manifest(list(entries)),
            archive=pb.Archive(data=data, filename=path.name),
            skipped_files=skipped_files,
        ),
        prune=prune,
        fresh_for_seconds=fresh_for,
    )
    jobs.append((await client.call("CreateJob", request)).job)
    return jobs
