"""`ragmesh index`, `ragmesh jobs` and `ragmesh sync`: bulk ingestion jobs on the indexer, followed with live
progress bars and summed up in a table. Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_common.clients import ServiceClient
from ragmesh_common.walk import Walk, WalkedFile, size_groups, walk, zip_files
from rich.table import Table

from .console import err, out, print_table
from .conversions import STATE_NAMES
from .indexer_jobs import FINAL, describe, follow, indexer_client

# Uploads (`ragmesh index --upload`) go as ZIP archives of at most this many bytes each.
UPLOAD_ARCHIVE_BYTES = 32 * 1024 * 1024


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def summary(jobs: Sequence[pb.Job], *, details: bool = True) -> None:
    """The summary table on stdout, then (with `details`) each failed document and each file skipped for a
    reason worth telling (empty files are skipped quietly)."""
    table = Table(
        "job",
        "collection",
        "state",
        "total",
        "indexed",
        "unchanged",
        "failed",
        "skipped",
        "deleted",
        "bytes",
        "docs/s",
        "MB/s",
        title="jobs",
    )
    for job in jobs:
        table.add_row(
            job.job_id,
            job.collection,
            STATE_NAMES.get(job.state, "?"),
            str(job.total),
            str(job.indexed),
            str(job.unchanged),
            str(job.failed),
            str(job.skipped),
            str(job.deleted),
            _size(job.bytes),
            f"{job.documents_per_second:.1f}",
            f"{job.bytes_per_second / 1e6:.2f}",
        )
    print_table(out, table)
    if not details:
        return
    for job in jobs:
        for error in job.errors:
            err.print(f"✗ {error.document}: {error.error.reason}: {error.error.message}", style="red")
        loud = [s for s in job.skipped_files if s.reason != "EMPTY"]
        for skipped in loud:
            err.print(f"- skipped {skipped.path}: {skipped.reason}", style="yellow")
        if job.HasField("reindex") and job.state in FINAL:
            describe(job)
        elif job.error:
            err.print(f"job {job.job_id} failed: {job.error}", style="red")


def exit_code(jobs: Sequence[pb.Job]) -> int:
    return 1 if any(j.failed or j.state == pb.JOB_STATE_FAILED for j in jobs) else 0


async def index(
    path: Path, collection: str, target: str, *, prune: bool, fresh_for: int, upload: bool, watch: bool
) -> int:
    """A folder job on the indexer (or, with `upload`, this machine's files sent as archive jobs)."""
    client = indexer_client(target)
    try:
        if upload:
            jobs = await _upload(client, path, collection)
        else:
            request = pb.CreateJobRequest(
                collection=collection, folder=str(path), prune=prune, fresh_for_seconds=fresh_for
            )
            jobs = [(await client.call("CreateJob", request)).job]
        finished = await follow(client, jobs, watch=watch)
    finally:
        await client.close()
    summary(finished)
    return exit_code(finished) if watch else 0


async def _upload(client: ServiceClient, path: Path, collection: str) -> list[pb.Job]:
    walked = await asyncio.to_thread(walk, path, max_bytes=UPLOAD_ARCHIVE_BYTES)
    for skipped in walked.skipped:
        if not skipped.quiet:
            err.print(f"- skipped {skipped.rel}: {skipped.reason}", style="yellow")
    jobs = []
    for files in size_groups(walked.files, UPLOAD_ARCHIVE_BYTES):
        data = await asyncio.to_thread(zip_files, files)
        request = pb.CreateJobRequest(collection=collection, archive=pb.Archive(data=data, filename=path.name))
        jobs.append((await client.call("CreateJob", request)).job)
    return jobs


async def jobs_list(target: str, limit: int) -> int:
    client = indexer_client(target)
    try:
        jobs = (await client.call("ListJobs", pb.ListJobsRequest(limit=limit))).jobs
    finally:
        await client.close()
    summary(jobs, details=False)
    return 0


async def jobs_show(target: str, job_id: str, *, watch: bool, cancel: bool) -> int:
    client = indexer_client(target)
    try:
        if cancel:
            job = (await client.call("CancelJob", pb.CancelJobRequest(job_id=job_id))).job
        else:
            job = (await client.call("GetJob", pb.GetJobRequest(job_id=job_id))).job
        finished = await follow(client, [job], watch=watch and not cancel)
    finally:
        await client.close()
    summary(finished)
    return 0


async def sync(
    target: str, collection: str, *, everything: bool, watch: bool, expired: bool, prune_expired: bool
) -> int:
    client = indexer_client(target)
    try:
        if expired or prune_expired:
            return await _expired(client, collection, prune=prune_expired)
        request = pb.SyncDatasourcesRequest(collection=collection, all=everything)
        jobs = list((await client.call("SyncDatasources", request)).jobs)
        if not jobs:
            err.print("nothing to sync: no datasource is due (--all re-runs every one)")
            return 0
        finished = await follow(client, jobs, watch=watch)
    finally:
        await client.close()
    summary(finished)
    return exit_code(finished) if watch else 0


async def _expired(client: ServiceClient, collection: str, *, prune: bool) -> int:
    if not collection:
        err.print("name the collection (--collection)", style="red")
        return 2
    if prune:
        deleted = (
            await client.call("PruneExpiredDocuments", pb.PruneExpiredDocumentsRequest(collection=collection))
        ).doc_ids
        err.print(f"{len(deleted)} expired documents deleted from {collection!r}")
        for doc_id in deleted:
            out.print(doc_id)
        return 0
    documents = (
        await client.call("ListExpiredDocuments", pb.ListExpiredDocumentsRequest(collection=collection))
    ).documents
    table = Table("document", "fresh until", "datasource", title=f"expired in {collection}")
    for d in documents:
        table.add_row(d.doc_id, d.fresh_until, d.datasource_id)
    print_table(out, table)
    return 0


def walk_for_ingest(paths: Sequence[Path], max_bytes: int) -> list[tuple[WalkedFile, str]]:
    """`ragmesh ingest`'s files: each path walked with the folder rules; (file, its path relative to the
    argument it came from, which becomes its document id). Skipped files are reported on stderr."""
    found = []
    for path in paths:
        walked: Walk = walk(path, max_bytes=max_bytes)
        for skipped in walked.skipped:
            if not skipped.quiet:
                err.print(f"- skipped {skipped.rel}: {skipped.reason}", style="yellow")
        found += [(f, f.rel) for f in walked.files]
    return found
