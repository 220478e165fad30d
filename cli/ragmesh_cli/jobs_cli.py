"""`ragmesh index`, `ragmesh jobs` and `ragmesh sync`: bulk ingestion jobs on the indexer, followed with live
progress bars and summed up in a table. A folder the indexer cannot read is sent from here (manifests.py).
Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_common.walk import Walk, WalkedFile, walk
from rich.table import Table

from . import manifests
from .console import err, out, print_table
from .conversions import STATE_NAMES
from .indexer_jobs import FINAL, describe, follow, indexer_client

# What the indexer answers for a folder it may not read: the folder is then sent from here.
UNREADABLE_THERE = (Reason.PATH_OUTSIDE_ROOTS, Reason.FOLDER_NOT_FOUND, Reason.LOCAL_PATHS_DISABLED)


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
    path: Path, collection: str, target: str, *, prune: bool, fresh_for: int, upload: bool | None, watch: bool
) -> int:
    """A folder job on the indexer; with `upload` (or when the indexer may not read the folder and `upload` is
    not False) the folder is walked here and only its new and changed files are sent (manifests.py)."""
    client = indexer_client(target)
    try:
        if upload:
            jobs = await manifests.upload(client, path, collection, prune=prune, fresh_for=fresh_for)
        else:
            request = pb.CreateJobRequest(
                collection=collection, folder=str(path), prune=prune, fresh_for_seconds=fresh_for
            )
            try:
                jobs = [(await client.call("CreateJob", request)).job]
            except RagmeshError as exc:
                if upload is False or exc.reason not in UNREADABLE_THERE:
                    raise
                err.print(
                    f"the indexer cannot read {path} ({exc.reason}); sending it from here: only new and changed "
                    "files are uploaded",
                    soft_wrap=True,
                )
                jobs = await manifests.upload(client, path, collection, prune=prune, fresh_for=fresh_for)
        finished = await follow(client, jobs, watch=watch)
    finally:
        await client.close()
    summary(finished)
    return exit_code(finished) if watch else 0


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
        jobs = await _sync_here(client, collection, everything=everything)
        request = pb.SyncDatasourcesRequest(collection=collection, all=everything)
        jobs += (await client.call("SyncDatasources", request)).jobs
        if not jobs:
            err.print("nothing to sync: no datasource is due (--all re-runs every one)")
            return 0
        finished = await follow(client, jobs, watch=watch)
    finally:
        await client.close()
    summary(finished)
    return exit_code(finished) if watch else 0


async def _sync_here(client: ServiceClient, collection: str, *, everything: bool) -> list[pb.Job]:
    """The manifest datasources (folders of a client's machine) that are due: those whose folder is here are sent
    again; the others are named, with where to sync them (the indexer syncs the rest)."""
    listed = await client.call("ListDatasources", pb.ListDatasourcesRequest(collection=collection))
    jobs: list[pb.Job] = []
    for ds in listed.datasources:
        if ds.kind != "manifest" or not (everything or ds.due):
            continue
        folder = Path(ds.folder)
        if ds.host != manifests.host() or not await asyncio.to_thread(folder.exists):
            err.print(
                f"{ds.collection}: {ds.host}:{ds.folder} is a folder of {ds.host}; run `ragmesh sync` (or `ragmesh "
                f"index {ds.folder}`) on {ds.host} to sync it",
                style="yellow",
                soft_wrap=True,
            )
            continue
        err.print(f"{ds.collection}: sending {ds.folder} from here", soft_wrap=True)
        jobs += await manifests.upload(client, folder, ds.collection, prune=ds.prune, fresh_for=ds.fresh_for_seconds)
    return jobs


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
